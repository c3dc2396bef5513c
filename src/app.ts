import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import Fastify, { LogController } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Logger } from 'pino';
import type { SetAgentStatus } from './agents/set-agent-status.js';
import type { Partner, PartnerKeyStore } from './auth/partner-keys.js';
import { errorHandler, problem, sendProblem } from './errors.js';
import type { Metrics } from './observability/metrics.js';
import { agentStatusRoute } from './routes/agent-status.js';
import { healthRoutes } from './routes/health.js';
import { registerOpenApi } from './routes/openapi.js';

declare module 'fastify' {
  interface FastifyRequest {
    partner: Partner | undefined;
    /** What the request did, for its one log line (never the key). */
    audit: { partner?: string; agentId?: string; enabled?: boolean; outcome?: string };
  }
}

export interface AppDeps {
  logger: Logger;
  metrics: Metrics;
  keyStore: PartnerKeyStore;
  setAgentStatus: SetAgentStatus;
  /** Readiness beyond "keys loaded": database reachable and not draining. */
  isReady: () => Promise<boolean>;
}

export const bodyLimitBytes = 16 * 1024;
const saneRequestId = /^[A-Za-z0-9._:@/+=-]{1,128}$/;

function requestId(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && saneRequestId.test(given) ? given : randomUUID();
}

/**
 * The Fastify app, built the same way in production (main.ts) and in every test: the whole route
 * table is here, stores come in as arguments.
 */
export async function buildApp(deps: AppDeps) {
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
    // Timeouts a reverse proxy in front of us expects (keep-alive above the ingress's idle timeout).
    connectionTimeout: 30_000,
    requestTimeout: 30_000,
    keepAliveTimeout: 65_000,
    routerOptions: { ignoreTrailingSlash: false },
    ajv: {
      // Reject, never strip or coerce: unknown properties and wrong types are a 400.
      customOptions: { removeAdditional: false, coerceTypes: false, useDefaults: false, allErrors: false },
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  // Only JSON bodies are accepted; Fastify's text/plain parser would let a string reach validation.
  app.removeContentTypeParser('text/plain');

  app.decorateRequest('partner', undefined);
  app.decorateRequest('audit', null as never);
  app.addHook('onRequest', async (request, reply) => {
    request.audit = {};
    reply.header('x-request-id', request.id);
    reply.header('x-content-type-options', 'nosniff');
    reply.header('cache-control', 'no-store');
  });

  // While closing, every response ends its connection: Fastify closes idle keep-alive connections
  // once, when close() starts, and a connection still busy then would otherwise stay open until its
  // keep-alive timeout and hold the shutdown.
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onSend', async (_request, reply) => {
    if (closing) reply.header('connection', 'close');
  });

  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched';
    const statusCode = reply.statusCode;
    deps.metrics.httpRequestDuration.observe(
      { method: request.method, route, status_code: String(statusCode) },
      reply.elapsedTime / 1000,
    );
    const probe = route === '/livez' || route === '/readyz';
    const level = probe ? 'debug' : statusCode >= 500 ? 'error' : 'info';
    request.log[level](
      {
        method: request.method,
        route,
        statusCode,
        durationMs: Math.round(reply.elapsedTime * 10) / 10,
        ...request.audit,
      },
      'request completed',
    );
  });

  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, problem('notFound', `No route for ${request.method} ${request.url.split('?')[0]}.`, request.id)),
  );

  await registerOpenApi(app);
  await app.register(healthRoutes, {
    isReady: async () => deps.keyStore.loaded && (await deps.isReady()),
  });
  await app.register(agentStatusRoute, { keyStore: deps.keyStore, setAgentStatus: deps.setAgentStatus, metrics: deps.metrics });

  return app;
}

export type App = Awaited<ReturnType<typeof buildApp>>;
