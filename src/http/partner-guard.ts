import { setTimeout as sleep } from 'node:timers/promises';
import rateLimit from '@fastify/rate-limit';
import { context, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestAsyncHookHandler } from 'fastify';
import type { Cluster, Redis } from 'ioredis';
import type { Deprecations } from '../api-versions.js';
import type { PartnerKeyStore } from '../auth/partner-keys.js';
import { redisFailure, timedCall } from '../observability/dependency-calls.js';
import type { Metrics } from '../observability/metrics.js';
import { apiVersionHooks } from './api-version-hooks.js';
import { partnerTexts, problem, problemDetails, sendProblem } from './problems.js';

export interface GuardSettings {
  keyStore: PartnerKeyStore;
  /** Event-loop delay (ms) above which the partner routes shed everything (OVERLOAD_MAX_EVENT_LOOP_DELAY_MS). */
  overloadMaxEventLoopDelayMs: number;
  /** Utilisation (percent) from which requests without a valid key are shed; 100 never. */
  overloadUnauthenticatedUtilizationPercent: number;
  metrics: Metrics;
  rateLimitMax: number;
  rateLimitWindowMs: number;
  redis: Redis | Cluster | undefined;
  keyPrefix: string;
  /** API_VERSION_DEPRECATIONS (src/api-versions.ts). */
  apiVersionDeprecations: Deprecations;
}

/**
 * What runs before any partner route does anything (docs/interfaces.md §3 and §10), in this order:
 * 1. authentication: the key from `x-api-key` only, looked up by digest, never stored, logged or
 *    echoed; a missing or unknown key is answered 401 from the hook itself (no exception: a flood
 *    of bad keys must stay cheap) and never reaches the rate limit, so it spends no budget;
 * 2. the network's rate limit, counted in Redis so that it holds across replicas (fixed window,
 *    @fastify/rate-limit's atomic script), keyed by the network from the key. Over the limit: 429
 *    with Retry-After; every answer carries the IETF draft's RateLimit-Policy and RateLimit fields.
 *    When Redis cannot be asked, the limit fails open: counted and logged, never a 500.
 * RATE_LIMIT_MAX=0 turns the limit off entirely (the plugin would read 0 as "refuse everything").
 * The API version is resolved right after authentication (the key may pin one) and an unknown or
 * sunset one refused after the rate limit (src/api-versions.ts).
 *
 * Requests without a valid key are shed first (docs/interfaces.md §10): for 10 s after a flood of
 * them (100 a second or more) found the process busy
 * (event-loop utilisation over the last second at least OVERLOAD_UNAUTHENTICATED_UTILIZATION_PERCENT,
 * 50 % by default, or a quarter of the delay at which everything is shed), they get a 503 with
 * Retry-After and `Connection: close`, held for a second first (at most 1,024 at once): a client
 * flooding bad keys on kept-alive connections then sends about one request a second per
 * connection, and the partners' requests keep the process (`npm run bench -- --only=flood`).
 */
/**
 * Requests without a valid key in the current and the previous second: shedding starts only under
 * a flood of them, never for the odd typo of a busy replica. Once it has started it goes on for
 * sheddingSeconds after the flood last made the process busy: held requests slow the flood down,
 * and the process is idle again, which must not end the shedding at once.
 */
class FloodWatch {
  private second = 0;
  private thisSecond = 0;
  private lastSecond = 0;
  private sheddingUntil = 0;
  private readonly utilization: number;
  private readonly maxDelayMs: number;

  constructor(
    settings: Pick<GuardSettings, 'overloadUnauthenticatedUtilizationPercent' | 'overloadMaxEventLoopDelayMs'>,
    private readonly pressure: (() => { eventLoopDelay: number; eventLoopUtilized: number }) | undefined,
  ) {
    this.utilization = settings.overloadUnauthenticatedUtilizationPercent / 100;
    this.maxDelayMs = settings.overloadMaxEventLoopDelayMs / 4;
  }

  /** Counts one request without a valid key; whether it is shed. */
  sheds(): boolean {
    if (this.utilization >= 1) return false;
    const now = Math.floor(performance.now() / 1_000);
    if (now !== this.second) {
      this.lastSecond = now === this.second + 1 ? this.thisSecond : 0;
      this.thisSecond = 0;
      this.second = now;
    }
    this.thisSecond += 1;
    if (Math.max(this.thisSecond, this.lastSecond) >= floodPerSecond) {
      const figures = this.pressure?.();
      const busy = figures !== undefined && (figures.eventLoopUtilized >= this.utilization || figures.eventLoopDelay > this.maxDelayMs);
      if (busy) this.sheddingUntil = now + sheddingSeconds;
    }
    return now < this.sheddingUntil;
  }
}

/** How long a shed unauthenticated request is held before its 503, and how many are held at once. */
const holdMs = 1_000;
const maxHeld = 1_024;
/** Requests without a valid key per second from which they count as a flood. */
const floodPerSecond = 100;
/** How long unauthenticated requests are shed after a flood of them last made the process busy. */
const sheddingSeconds = 10;

/**
 * Guards the partner scope `app` (the plugin that holds every partner route): its hooks run on
 * each of its requests before anything of a route does, so a route added to the scope is
 * authenticated without asking for it (test/unit/partner-scope.test.ts walks the path table).
 */
export async function guardPartnerScope(app: FastifyInstance, settings: GuardSettings): Promise<void> {
  for (const hook of await partnerHooks(app, settings)) app.addHook('onRequest', hook);
}

async function partnerHooks(app: FastifyInstance, settings: GuardSettings): Promise<onRequestAsyncHookHandler[]> {
  const { keyStore, metrics } = settings;
  // The counters of a flood of bad keys, labelled once rather than per request.
  const authFailures = {
    missing: metrics.authFailures.labels({ reason: 'missing' }),
    unknown: metrics.authFailures.labels({ reason: 'unknown' }),
  };

  // under-pressure's figures (registered in the same scope, src/http/route-table.ts).
  const pressure = (app as FastifyInstance & { memoryUsage?: () => { eventLoopDelay: number; eventLoopUtilized: number } }).memoryUsage;
  const flood = new FloodWatch(settings, pressure);
  let held = 0;

  async function shed(request: FastifyRequest, reply: FastifyReply) {
    request.audit.outcome = 'unauthenticated_shed';
    if (held < maxHeld) {
      held += 1;
      await sleep(holdMs);
      held -= 1;
    }
    reply.header('retry-after', '1').header('connection', 'close');
    return sendProblem(reply, problem('unavailable', problemDetails.unavailable, request.id));
  }

  async function authenticate(request: FastifyRequest, reply: FastifyReply) {
    const apiKey = request.headers['x-api-key'];
    const partner = typeof apiKey === 'string' && apiKey.length > 0 ? keyStore.lookup(apiKey) : undefined;
    if (!partner) {
      const reason = typeof apiKey === 'string' && apiKey.length > 0 ? 'unknown' : 'missing';
      authFailures[reason].inc();
      if (flood.sheds()) return shed(request, reply);
      return sendProblem(
        reply,
        problem('unauthorized', reason === 'missing' ? partnerTexts.missingKey : partnerTexts.unknownKey, request.id),
      );
    }
    metrics.partnerRequestsAuthenticated.inc({ partner: partner.name });
    request.partner = partner;
    request.audit.partner = partner.name;
    trace.getActiveSpan()?.setAttributes({ 'partner.name': partner.name, 'network.id': partner.networkId });
  }
  const versions = apiVersionHooks(app, settings.apiVersionDeprecations, metrics);
  if (settings.rateLimitMax === 0 || !settings.redis) return [authenticate, versions.resolve, versions.refuseUnsupported];

  await app.register(rateLimit, {
    global: false,
    redis: settings.redis,
    nameSpace: `${settings.keyPrefix}rate-limit:`,
    max: settings.rateLimitMax,
    timeWindow: settings.rateLimitWindowMs,
    keyGenerator: (request) => request.partner!.networkId,
    skipOnError: false,
  });
  const check = app.createRateLimit();
  const policy = `"partner";q=${settings.rateLimitMax};w=${Math.ceil(settings.rateLimitWindowMs / 1000)}`;
  let lastFailOpenLog = 0;
  const limitFields = new WeakMap<FastifyRequest, Record<string, string>>();
  app.addHook('onSend', (request, reply, payload, done) => {
    const fields = limitFields.get(request);
    if (fields && reply.statusCode < 400) reply.headers(fields);
    done(null, payload);
  });

  async function limitRate(request: FastifyRequest, reply: FastifyReply) {
    let result: Awaited<ReturnType<typeof check>>;
    try {
      // Outside the request's trace: the Redis instrumentation makes no span without a parent,
      // and a span for this one command on every request cost about a tenth of a traced request's
      // CPU. Its latency is dependency_request_duration_seconds{operation="rate_limit"}, and in a
      // trace it is the gap between the server span's start and the use case's.
      result = await timedCall(metrics, 'redis', 'rate_limit', () => context.with(ROOT_CONTEXT, () => check(request)), redisFailure);
    } catch (error) {
      metrics.rateLimitStoreErrors.inc();
      if (Date.now() - lastFailOpenLog > 10_000) {
        lastFailOpenLog = Date.now();
        request.log.warn(
          { dependency: 'redis', reason: (error as Error).message.slice(0, 120) },
          'rate limit unavailable; letting requests through',
        );
      }
      return;
    }
    if (result.isAllowed) return;
    const fields = { 'ratelimit-policy': policy, ratelimit: `"partner";r=${result.remaining};t=${result.ttlInSeconds}` };
    if (!result.isExceeded) {
      // Shown on successful answers only: the quota left changes from one request to the next, and
      // a 404 must stay byte-for-byte the same whichever agent it is about (docs/interfaces.md §3).
      limitFields.set(request, fields);
      return;
    }
    reply.headers(fields);
    reply.header('retry-after', String(Math.max(1, result.ttlInSeconds)));
    metrics.requestsLimited.inc({ partner: request.partner!.name, limit: 'rate' });
    request.audit.outcome = 'limited';
    return sendProblem(reply, problem('rateLimited', problemDetails.rateLimited, request.id));
  }
  return [authenticate, versions.resolve, limitRate, versions.refuseUnsupported];
}
