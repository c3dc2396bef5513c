import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { trace } from '@opentelemetry/api';
import Fastify, { LogController } from 'fastify';
import type { Logger } from 'pino';
import type { Partner } from '../auth/partner-keys.js';
import { installAccessLog } from './access-log.js';
import { clientErrorHandler } from './malformed-http.js';
import { bodyLimitBytes, errorHandler, problem, sendProblem } from './problems.js';
import { type RouteDeps, registerRoutes } from './route-table.js';
import { ProblemSchema } from './routes/problem-schema.js';

declare module 'fastify' {
  interface FastifyRequest {
    partner: Partner | undefined;
    /** What the request did, for its one log line (never the key). */
    audit: { partner?: string; agentId?: string; enabled?: boolean; outcome?: string };
  }
}

export interface AppDeps extends RouteDeps {
  logger: Logger;
}

const saneRequestId = /^[A-Za-z0-9._:@/+=-]{1,128}$/;

/**
 * The Fastify app, built the same way in production (main.ts) and in every test: the whole route
 * table is here, stores come in as arguments.
 */
export async function buildApp(deps: AppDeps) {
  const { metrics, keyStore } = deps;
  // The caller's x-request-id when it is sane, and never a value that is a partner key.
  const requestId = (req: IncomingMessage): string => {
    const given = req.headers['x-request-id'];
    return typeof given === 'string' && saneRequestId.test(given) && !keyStore.holds(given) ? given : randomUUID();
  };
  const app = Fastify({
    loggerInstance: deps.logger,
    // One line per request, written by the onResponse hook below, instead of Fastify's two.
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'requestId' }),
    genReqId: requestId,
    requestIdHeader: false,
    bodyLimit: bodyLimitBytes,
    // Requests that still arrive on an open connection while closing are served (the pools close
    // only after the server) and answered with `connection: close`, not with Fastify's bare 503.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    // No inactivity cut-off on a connection: a disable answers by REQUEST_DEADLINE_MS, and a socket
    // reset would be the only answer a silent handler could get. Receiving a request is bounded;
    // keep-alive stays above the idle time-out of the proxies in front (60 s).
    connectionTimeout: 0,
    requestTimeout: 30_000,
    keepAliveTimeout: 72_000,
    routerOptions: { ignoreTrailingSlash: false },
    // Malformed HTTP gets problem+json with a request id, and its raw bytes are never logged.
    clientErrorHandler,
    // Errors Fastify raises before routing (bad URL encoding, ...) go through the same handler.
    frameworkErrors: (error, request, reply) => {
      reply.header('x-request-id', request.id);
      errorHandler(error, request, reply);
    },
    ajv: {
      // Reject, never strip or coerce: unknown properties and wrong types are a 400.
      customOptions: { removeAdditional: false, coerceTypes: false, useDefaults: false, allErrors: false },
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  // Only JSON bodies are accepted; Fastify's text/plain parser would let a string reach validation.
  app.removeContentTypeParser('text/plain');

  app.decorateRequest('partner', undefined);
  app.decorateRequest('audit', null as never);
  // Hooks on every request are plain callbacks, not async functions: no promise per request.
  app.addHook('onRequest', (request, reply, done) => {
    request.audit = {};
    reply.headers({ 'x-request-id': request.id, 'x-content-type-options': 'nosniff', 'cache-control': 'no-store' });
    // Tracing on: the HTTP server span (the request's only span from the framework) gets its route,
    // so traces group by endpoint; tracing off, there is no active span and this costs one lookup.
    const span = trace.getActiveSpan();
    const route = request.routeOptions.url;
    if (span && route) span.setAttribute('http.route', route).updateName(`${request.method} ${route}`);
    done();
  });

  // While closing, every response ends its connection: Fastify closes idle keep-alive connections
  // once, when close() starts, and a connection still busy then would otherwise stay open until its
  // keep-alive timeout and hold the shutdown.
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (closing) reply.header('connection', 'close');
    done(null, payload);
  });

  installAccessLog(app, metrics);

  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, problem('notFound', `No route for ${request.method} ${request.url.split('?')[0]}.`, request.id)),
  );
  app.addSchema(ProblemSchema);

  await registerRoutes(app, deps);

  return app;
}
