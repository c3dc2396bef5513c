import type { IncomingMessage } from 'node:http';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { trace } from '@opentelemetry/api';
import Fastify, { LogController } from 'fastify';
import type { Logger } from 'pino';
import type { Partner } from '../auth/partner-keys.js';
import { installAccessLog } from './access-log.js';
import type { AuditOutcome } from './answers.js';
import { errorHandler } from './error-handler.js';
import { clientErrorHandlerWith, connectHandler } from './malformed-http.js';
import { bodyLimitBytes, partnerTexts, problem, sendProblem } from './problems.js';
import { meetsExpectation, requestIdOf } from './request-headers.js';
import { type RouteDeps, registerRoutes } from './route-table.js';
import { ProblemSchema } from './routes/problem-schema.js';
import { strictJsonParser } from './strict-json.js';

declare module 'fastify' {
  interface FastifyRequest {
    partner: Partner | undefined;
    /** What the request did, for its one log line (never the key). */
    audit: { partner?: string; apiVersion?: string; agentId?: string; enabled?: boolean; outcome?: AuditOutcome };
  }
}

export interface AppDeps extends RouteDeps {
  logger: Logger;
}

/** The headers every answer carries. */
const usualHeaders = { 'x-content-type-options': 'nosniff', 'cache-control': 'no-store' } as const;

/** The route template a request no route matches is known by in traces (Fastify's not-found route). */
const notFoundTemplate = '/*';

/**
 * The Fastify app, built the same way in production (main.ts) and in every test: the whole route
 * table is here, stores come in as arguments.
 */
export async function buildApp(deps: AppDeps) {
  const { metrics } = deps;
  const keyShapedIds = metrics.suspiciousRequests.labels({ reason: 'key_shaped_request_id' });
  // The caller's x-request-id when it is sane and holds nothing shaped like a key; one that does is
  // counted (never logged) and replaced, the same for a loaded key and any other string of its shape.
  const requestId = (req: IncomingMessage): string => {
    const { id, keyShaped } = requestIdOf(req.headers['x-request-id']);
    if (keyShaped) keyShapedIds.inc();
    return id;
  };
  let accessLog: ReturnType<typeof installAccessLog> | undefined;
  const app = Fastify({
    loggerInstance: deps.logger,
    // A request without Host (HTTP/1.1) is answered by the app (a 400 problem), not by Node's bare 400.
    http: { requireHostHeader: false },
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
    clientErrorHandler: clientErrorHandlerWith((statusCode) => accessLog?.unparsed(statusCode)),
    // Errors Fastify raises before routing (bad URL encoding, ...) go through the same handler.
    // No hook runs for them: the usual headers and the access line are added here.
    frameworkErrors: (error, request, reply) => {
      const startedAt = performance.now();
      reply.headers({ 'x-request-id': request.id, ...usualHeaders });
      errorHandler(error, request, reply);
      accessLog?.outsideHooks(request, reply, startedAt);
    },
    ajv: {
      // Reject, never strip or coerce: unknown properties and wrong types are a 400.
      customOptions: { removeAdditional: false, coerceTypes: false, useDefaults: false, allErrors: false },
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  // Only JSON bodies are accepted; Fastify's text/plain parser would let a string reach validation.
  // JSON only in UTF-8, never content-encoded, and with no member name twice (strict-json.ts).
  app.removeContentTypeParser(['text/plain', 'application/json']);
  app.addContentTypeParser('application/json', { parseAs: 'string' }, strictJsonParser(app.getDefaultJsonParser('error', 'error')));

  // An Expect other than 100-continue: Node would answer a bare 417; the app answers it instead.
  app.server.on('checkExpectation', (request, response) => app.server.emit('request', request, response));

  app.decorateRequest('partner', undefined);
  app.decorateRequest('audit', null as never);
  // Hooks on every request are plain callbacks, not async functions: no promise per request.
  app.addHook('onRequest', (request, reply, done) => {
    request.audit = {};
    reply.headers({ 'x-request-id': request.id, ...usualHeaders });
    // Tracing on: the HTTP server span (the request's only span from the framework) gets its route,
    // so traces group by endpoint; tracing off, there is no active span and this costs one lookup.
    // A request no route matches is exported by the not-found handler's template, never by its path.
    const span = trace.getActiveSpan();
    const route = request.routeOptions.url;
    if (span) {
      if (route) span.setAttribute('http.route', route).updateName(`${request.method} ${route}`);
      else span.setAttribute('url.path', notFoundTemplate);
    }
    const { headers, httpVersion } = request.raw;
    if (httpVersion === '1.1' && headers.host === undefined) {
      reply.header('connection', 'close');
      sendProblem(reply, problem('validation', partnerTexts.missingHost, request.id));
      return;
    }
    if (httpVersion === '1.1' && headers.expect !== undefined && !meetsExpectation(headers.expect)) {
      sendProblem(reply, problem('expectationFailed', partnerTexts.expectation, request.id));
      return;
    }
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

  accessLog = installAccessLog(app, metrics);
  const answered = accessLog;
  // CONNECT never reaches the app: Node would drop the connection without an answer.
  app.server.on(
    'connect',
    connectHandler((requestId, status) => answered.serverAnswer(app.log, 'CONNECT', status, requestId)),
  );

  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler((request, reply) => sendProblem(reply, problem('notFound', partnerTexts.noRoute, request.id)));
  app.addSchema(ProblemSchema);

  await registerRoutes(app, deps);

  return app;
}
