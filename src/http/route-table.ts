import type { IncomingMessage, ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import underPressure from '@fastify/under-pressure';
import type { FastifyInstance, FastifyReply, FastifyRequest, RawServerDefault } from 'fastify';
import type { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { AgentStatusUseCase } from '../agents/set-agent-status.js';
import type { BulkStatusUseCase } from '../agents/set-agents-status.js';
import type { Deprecations } from '../api-versions.js';
import type { PartnerKeyStore } from '../auth/partner-keys.js';
import type { LimitSettings } from '../config.js';
import type { Metrics } from '../observability/metrics.js';
import type { IdempotencyKeys } from '../stores/idempotency-keys.js';
import type { StatusBatches } from '../stores/status-batches.js';
import { batchAllowance } from './batch-allowance.js';
import { guardPartnerScope } from './partner-guard.js';
import { partnerPrefix } from './paths.js';
import { partnerTexts, problem, problemDetails, sendProblem } from './problems.js';
import { agentStatusRoute } from './routes/agent-status.js';
import { statusBatchRoute } from './routes/agent-status-batch.js';
import { statusChangesRoute } from './routes/agent-status-changes.js';
import { agentStatusReadRoute } from './routes/agent-status-read.js';
import { healthRoutes } from './routes/health.js';
import { registerOpenApi } from './routes/openapi.js';
import { type EventFeedRouteDeps, partnerEventRoutes } from './routes/partner-events.js';
import { referencePageRoutes } from './routes/reference-page.js';
import { type WebhookRouteDeps, webhookEndpointRoutes } from './routes/webhook-endpoints.js';
import { UnauthenticatedShedding } from './unauthenticated-shedding.js';

export type HttpApp = FastifyInstance<RawServerDefault, IncomingMessage, ServerResponse, Logger, TypeBoxTypeProvider>;

/** What the routes need from the rest of the service. */
export interface RouteDeps {
  metrics: Metrics;
  keyStore: PartnerKeyStore;
  agentStatus: AgentStatusUseCase;
  /** The Idempotency-Key store of the status change (docs/interfaces.md §11). */
  idempotencyKeys: IdempotencyKeys;
  /** Readiness: keys loaded, database reachable, not draining. */
  isReady: () => Promise<boolean>;
  /** The limits' settings (docs/interfaces.md §10): plain values only. */
  limits: LimitSettings;
  /**
   * The rate limit's store: its own Redis client (absent when the limit is off, RATE_LIMIT_MAX=0)
   * and the key prefix its counters share with the campaign state's keys.
   */
  rateLimitStore: { redis: Redis | Cluster | undefined; keyPrefix: string };
  /** API_VERSION_DEPRECATIONS; none when absent. */
  apiVersionDeprecations?: Deprecations;
  /** The partner webhook endpoints (docs/interfaces.md §14). */
  webhooks: WebhookRouteDeps;
  /** Bulk status changes (docs/interfaces.md §16): the use case and the batches' store. */
  bulk: { changes: BulkStatusUseCase; batches: StatusBatches };
  /** The partner events feed (docs/interfaces.md §17). */
  eventFeed: Omit<EventFeedRouteDeps, 'metrics'>;
}

// Through require for the same reason as in malformed-http.ts (no ES facade of node:http).
const { METHODS } = createRequire(import.meta.url)('node:http') as typeof import('node:http');

/**
 * The methods a path that exists but does not serve them answers with 405 and Allow: every method
 * Node's parser accepts (OPTIONS, TRACE, PROPFIND, QUERY, ...), except CONNECT, whose target is a
 * host, never a path (malformed-http.ts answers it). Fastify routes only some of them by itself.
 */
const answerableMethods = METHODS.filter((method) => method !== 'CONNECT');

/** Lets Fastify route every method of answerableMethods (its own set is GET, HEAD, TRACE, DELETE, OPTIONS, PATCH, PUT, POST and a few). */
function routeEveryMethod(app: HttpApp): void {
  const routed = new Set(app.supportedMethods);
  for (const method of answerableMethods) {
    if (!routed.has(method)) app.addHttpMethod(method);
  }
}

/** under-pressure's sample interval: it measures the event-loop delay over each second. */
const pressureSampleMs = 1_000;

/**
 * Whether under-pressure's verdict sheds a request. It reports a second without a single event-loop
 * sample (the loop blocked, or the process not scheduled, for the whole second: a busy machine) as
 * an infinite delay, whatever the delay was: that proves a delay of a second, so it sheds only
 * where OVERLOAD_MAX_EVENT_LOOP_DELAY_MS is below a second (issue 37: a threshold of 60 s still shed).
 */
export function shedsFor(type: string, value: number | undefined, maxEventLoopDelayMs: number): boolean {
  if (type === 'eventLoopDelay' && value === Number.POSITIVE_INFINITY) return maxEventLoopDelayMs < pressureSampleMs;
  return true;
}

/**
 * The whole route table, in one place: the API documents, the probes, then the partner API under
 * load shedding, authentication and the rate limit. The reference page and the partner API are
 * mounted under `partnerPrefix`, their paths taken from the table of src/http/paths.ts (the OpenAPI
 * document's own route too). Every other method on a path of the table is
 * answered 405 with Allow, derived from the routes registered here (never a list kept by hand).
 */
export async function registerRoutes(app: HttpApp, deps: RouteDeps): Promise<void> {
  const { metrics, keyStore } = deps;
  routeEveryMethod(app);
  const served = new Map<string, Set<string>>();
  app.addHook('onRoute', (route) => {
    if (route.url.includes('*')) return; // static assets: no 405 for a wildcard
    const methods = served.get(route.url) ?? new Set<string>();
    for (const method of [route.method].flat()) methods.add(method);
    served.set(route.url, methods);
  });

  // Requests without a key (the API documents, bad keys) share one shedding: a flood of them
  // that makes the process busy is answered 503 (src/http/unauthenticated-shedding.ts).
  const shedding = new UnauthenticatedShedding({
    utilizationPercent: deps.limits.overloadUnauthenticatedUtilizationPercent,
    overloadMaxEventLoopDelayMs: deps.limits.overloadMaxEventLoopDelayMs,
  });
  await registerOpenApi(app, deps.apiVersionDeprecations ?? new Map(), shedding);
  await app.register(referencePageRoutes, { prefix: partnerPrefix, shed: shedding.hook });
  await app.register(healthRoutes, { isReady: deps.isReady });

  // The partner API proper: shed under overload (probes, metrics and the API documents never
  // are), then authentication and the rate limit before anything else of a route runs.
  await app.register(
    async (partnerApi) => {
      await partnerApi.register(underPressure, {
        maxEventLoopDelay: deps.limits.overloadMaxEventLoopDelayMs,
        // Utilisation of the last sample, not since the start: what the guard sheds unauthenticated requests by.
        eventLoopUtilizationMode: 'interval',
        exposeStatusRoute: false,
        pressureHandler: (request, reply, type, value) => {
          if (!shedsFor(type, value, deps.limits.overloadMaxEventLoopDelayMs)) return undefined;
          metrics.requestsShed.inc();
          reply.code(503).type('application/problem+json').header('retry-after', '1');
          // A value returned here is what the plugin sends (typed as void, it accepts any).
          return problem('unavailable', problemDetails.unavailable, request.id) as never;
        },
      });
      // The scope authenticates itself: every route registered in it below is guarded.
      await guardPartnerScope(partnerApi, {
        keyStore,
        overloadMaxEventLoopDelayMs: deps.limits.overloadMaxEventLoopDelayMs,
        overloadUnauthenticatedUtilizationPercent: deps.limits.overloadUnauthenticatedUtilizationPercent,
        metrics,
        rateLimitMax: deps.limits.rateLimitMax,
        rateLimitWindowMs: deps.limits.rateLimitWindowMs,
        redis: deps.rateLimitStore.redis,
        keyPrefix: deps.rateLimitStore.keyPrefix,
        apiVersionDeprecations: deps.apiVersionDeprecations ?? new Map(),
        shedding,
      });
      await partnerApi.register(agentStatusRoute, {
        agentStatus: deps.agentStatus,
        metrics,
        requestDeadlineMs: deps.limits.requestDeadlineMs,
        idempotencyKeys: deps.idempotencyKeys,
        isApiKey: (value) => keyStore.holdsAnywhere(value),
      });
      await partnerApi.register(statusBatchRoute, {
        bulk: deps.bulk.changes,
        batches: deps.bulk.batches,
        metrics,
        requestDeadlineMs: deps.limits.requestDeadlineMs,
        allowance: batchAllowance({
          redis: deps.rateLimitStore.redis,
          keyPrefix: deps.rateLimitStore.keyPrefix,
          rateLimitMax: deps.limits.rateLimitMax,
          rateLimitWindowMs: deps.limits.rateLimitWindowMs,
          metrics,
        }),
        isApiKey: (value) => keyStore.holdsAnywhere(value),
      });
      await partnerApi.register(agentStatusReadRoute, { agentStatus: deps.agentStatus });
      await partnerApi.register(statusChangesRoute, { agentStatus: deps.agentStatus });
      await partnerApi.register(webhookEndpointRoutes, deps.webhooks);
      await partnerApi.register(partnerEventRoutes, { ...deps.eventFeed, metrics });
    },
    { prefix: partnerPrefix },
  );

  for (const [url, methods] of served) {
    const allowed = answerableMethods.filter((method) => methods.has(method));
    const others = answerableMethods.filter((method) => !methods.has(method));
    if (others.length === 0) continue;
    const answer = (request: FastifyRequest, reply: FastifyReply) => {
      reply.header('allow', allowed.join(', '));
      sendProblem(reply, problem('methodNotAllowed', partnerTexts.methodNotAllowed(request.method, allowed), request.id));
    };
    app.route({
      method: others,
      url,
      schema: { hide: true },
      // Answered before any body is read: a method the path does not serve is a 405 whatever it sends.
      onRequest: (request, reply, _done) => answer(request, reply),
      handler: (request, reply) => answer(request, reply),
    });
  }
}
