import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import underPressure from '@fastify/under-pressure';
import { trace } from '@opentelemetry/api';
import Fastify, { type FastifyReply, type FastifyRequest, LogController } from 'fastify';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { AgentStatusUseCase } from '../agents/set-agent-status.js';
import type { Partner, PartnerKeyStore } from '../auth/partner-keys.js';
import type { LimitSettings } from '../config.js';
import type { Metrics } from '../observability/metrics.js';
import { clientErrorHandler } from './malformed-http.js';
import { createPartnerGuard } from './partner-guard.js';
import { errorHandler, problem, problemDetails, sendProblem } from './problems.js';
import { agentStatusRoute } from './routes/agent-status.js';
import { agentStatusReadRoute } from './routes/agent-status-read.js';
import { healthRoutes } from './routes/health.js';
import { registerOpenApi } from './routes/openapi.js';
import { ProblemSchema } from './routes/problem-schema.js';
import { referencePageRoutes } from './routes/reference-page.js';

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
  agentStatus: AgentStatusUseCase;
  /** Readiness: keys loaded, database reachable, not draining. */
  isReady: () => Promise<boolean>;
  /** redis: the rate limit's client, absent when the limit is off (RATE_LIMIT_MAX=0). */
  limits: LimitSettings & { redis: Redis | undefined; keyPrefix: string };
}

export const bodyLimitBytes = 16 * 1024;
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

  // A flood of bad keys must not become a flood of log lines: 401s are logged at most once a
  // second (metrics count every one); the next line says how many were left out.
  let last401Log = 0;
  let suppressed401 = 0;
  const suppressedAuthLines = metrics.logLinesSuppressed.labels({ reason: 'auth_failure' });
  // One histogram child per (method, route, status): prom-client then skips hashing the labels.
  const durations = new Map<string, { observe: (value: number) => void }>();
  app.addHook('onResponse', (request, reply, done) => {
    logResponse(request, reply);
    done();
  });
  function logResponse(request: FastifyRequest, reply: FastifyReply): void {
    const route = request.routeOptions.url ?? 'unmatched';
    const statusCode = reply.statusCode;
    const series = `${request.method} ${route} ${statusCode}`;
    let duration = durations.get(series);
    if (!duration) {
      duration = metrics.httpRequestDuration.labels({ method: request.method, route, status_code: String(statusCode) });
      durations.set(series, duration);
    }
    duration.observe(reply.elapsedTime / 1000);
    let extra: { suppressedSinceLastLine?: number } = {};
    if (statusCode === 401) {
      const now = Date.now();
      if (now - last401Log < 1_000) {
        suppressed401 += 1;
        suppressedAuthLines.inc();
        return;
      }
      last401Log = now;
      if (suppressed401 > 0) extra = { suppressedSinceLastLine: suppressed401 };
      suppressed401 = 0;
    }
    const probe = route === '/livez' || route === '/readyz';
    const level = probe ? 'debug' : statusCode >= 500 ? 'error' : 'info';
    request.log[level](
      { method: request.method, route, statusCode, durationMs: Math.round(reply.elapsedTime * 10) / 10, ...request.audit, ...extra },
      'request completed',
    );
  }

  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, problem('notFound', `No route for ${request.method} ${request.url.split('?')[0]}.`, request.id)),
  );
  app.addSchema(ProblemSchema);

  await registerOpenApi(app);
  await app.register(referencePageRoutes);
  await app.register(healthRoutes, { isReady: deps.isReady });

  // The partner API proper: shed under overload (probes, metrics and the API documents never
  // are), then authentication and the rate limit before anything else of a route runs.
  await app.register(async (partnerApi) => {
    await partnerApi.register(underPressure, {
      maxEventLoopDelay: deps.limits.overloadMaxEventLoopDelayMs,
      exposeStatusRoute: false,
      pressureHandler: (request, reply) => {
        metrics.requestsShed.inc();
        reply.code(503).type('application/problem+json').header('retry-after', '1');
        // A value returned here is what the plugin sends (typed as void, it accepts any).
        return problem('unavailable', problemDetails.unavailable, request.id) as never;
      },
    });
    const guard = await createPartnerGuard(partnerApi, {
      keyStore,
      metrics,
      rateLimitMax: deps.limits.rateLimitMax,
      rateLimitWindowMs: deps.limits.rateLimitWindowMs,
      redis: deps.limits.redis,
      keyPrefix: deps.limits.keyPrefix,
    });
    await partnerApi.register(agentStatusRoute, {
      agentStatus: deps.agentStatus,
      metrics,
      guard,
      requestDeadlineMs: deps.limits.requestDeadlineMs,
    });
    await partnerApi.register(agentStatusReadRoute, { agentStatus: deps.agentStatus, guard });
  });

  // Known paths answer other methods with 405 and Allow, as problem+json.
  const allowed: Record<string, string[]> = {
    '/partner/agents/status': ['POST'],
    '/partner/agents/:agentId/status': ['GET', 'HEAD'],
    '/partner/openapi.json': ['GET', 'HEAD'],
  };
  for (const [url, methods] of Object.entries(allowed)) {
    const others = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'].filter((method) => !methods.includes(method));
    app.route({
      method: others,
      url,
      schema: { hide: true },
      handler: (request, reply) => {
        reply.header('allow', methods.join(', '));
        return sendProblem(
          reply,
          problem('methodNotAllowed', `${request.method} is not allowed here; use ${methods.join(' or ')}.`, request.id),
        );
      },
    });
  }

  return app;
}
