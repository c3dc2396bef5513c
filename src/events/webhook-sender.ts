import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { Agent, request } from 'undici';
import type { WebhookSettings } from '../config.js';
import { sqlstateFields } from '../observability/dependency-calls.js';
import type { Metrics } from '../observability/metrics.js';
import type { AttemptOutcome } from '../observability/webhook-metrics.js';
import type { ClaimedDelivery, WebhookDeliveryStore } from '../stores/webhook-deliveries.js';
import { allowedRanges, ForbiddenAddress, guardedConnector, type Lookup } from './address-guard.js';
import { signedHeaders } from './webhook-signature.js';

/** Deliveries of one endpoint under way at once, across replicas. */
const perEndpointInFlight = 4;
/** The most of a response the sender reads; the rest is dropped with the connection. */
const responseReadCap = 64 * 1024;
/** An endpoint whose every attempt failed for this long is disabled. */
const disableAfterFailingMs = 5 * 24 * 3600 * 1000;
/** How long a finished delivery stays in the history (and can be sent again). */
const retentionMs = 30 * 24 * 3600 * 1000;
const pruneIntervalMs = 60_000;
const pruneBatch = 500;
/** How long a nudge waits, so that slots freed together are filled by one claim. */
const nudgeDelayMs = 5;
/** The longest Retry-After the sender honours. */
const maxRetryAfterMs = 24 * 3600 * 1000;

/** The delay Retry-After asks for (delta-seconds or an HTTP date), if it is one. */
export function retryAfterMs(value: string | string[] | undefined, now = Date.now()): number | undefined {
  const raw = Array.isArray(value) ? value[0] : value;
  if (!raw) return undefined;
  const ms = /^\d+$/.test(raw.trim()) ? Number(raw.trim()) * 1000 : Date.parse(raw) - now;
  return Number.isFinite(ms) && ms > 0 ? Math.min(ms, maxRetryAfterMs) : undefined;
}

/**
 * The gap before the next attempt, when there is one: the schedule's gap for the attempts made
 * since the schedule started, within ±10 % (so endpoints that failed together are not retried
 * together), or longer when the endpoint's Retry-After asks for more.
 */
export function nextAttemptInMs(
  scheduleMs: readonly number[],
  attemptsInSchedule: number,
  retryAfter: number | undefined,
  random = Math.random,
): number | undefined {
  const gap = scheduleMs[attemptsInSchedule - 1];
  if (gap === undefined) return undefined;
  const jittered = Math.round(gap * (0.9 + 0.2 * random()));
  return Math.max(jittered, retryAfter ?? 0);
}

function outcomeOfError(error: unknown, timedOut: boolean): AttemptOutcome {
  let cause: unknown = error;
  for (let depth = 0; cause && depth < 5; depth += 1) {
    if (cause instanceof ForbiddenAddress) return 'refused';
    cause = (cause as { cause?: unknown }).cause;
  }
  const code = (error as { code?: string }).code ?? '';
  const name = (error as { name?: string }).name ?? '';
  if (timedOut || name === 'TimeoutError' || /TIMEOUT/.test(code)) return 'timeout';
  return 'network_error';
}

export interface WebhookSenderDeps {
  store: WebhookDeliveryStore;
  settings: WebhookSettings;
  /**
   * A claim's lease: longer than an attempt and the statement that records it can take together,
   * so that a live attempt is never taken over.
   */
  leaseMs: number;
  owner: string;
  metrics: Metrics;
  log: Logger;
  /** DNS resolution of endpoint hosts (tests put a stub here). */
  resolve?: Lookup;
}

/**
 * The webhook sender of docs/interfaces.md §14, one per replica: a worker like the convergence
 * worker. Every poll (with jitter) it claims due deliveries up to its free capacity, spread over
 * networks and bounded per endpoint and per network, so that one network's slow or failing endpoint
 * never holds the capacity another network's deliveries need. Each claim is a lease longer than an
 * attempt can last; the attempt's record is fenced by it; a replica that dies leaves its leases to
 * run out, and its deliveries are attempted again, with the same webhook-id, by any replica.
 */
export function createWebhookSender(deps: WebhookSenderDeps) {
  const { store, settings, metrics, log } = deps;
  const { leaseMs } = deps;
  const perNetworkInFlight = Math.max(perEndpointInFlight, Math.floor(settings.concurrency / 4));
  const agent = new Agent({
    connect: guardedConnector({
      allowed: settings.allowedCidrs.length > 0 ? allowedRanges(settings.allowedCidrs) : undefined,
      connectTimeoutMs: settings.timeoutMs,
      resolve: deps.resolve,
    }),
    keepAliveTimeout: 4_000,
    connections: perEndpointInFlight,
  });
  const shutdown = new AbortController();
  const running = new Set<Promise<void>>();
  let timer: NodeJS.Timeout | undefined;
  let polling: Promise<void> | undefined;
  let pollAgain = false;
  let nudged: NodeJS.Timeout | undefined;
  let lastPrune = Number.NEGATIVE_INFINITY;
  let stopped = true;

  async function send(claim: ClaimedDelivery): Promise<{ outcome: AttemptOutcome; statusCode: number | null; retryAfter?: number }> {
    const at = new Date();
    const timeout = AbortSignal.timeout(settings.timeoutMs);
    try {
      const response = await request(claim.url, {
        method: 'POST',
        dispatcher: agent,
        headers: {
          'content-type': 'application/json',
          'user-agent': 'partner-agent-status-webhooks',
          ...signedHeaders(claim.eventId, at, claim.body, claim.secrets),
        },
        body: claim.body,
        signal: AbortSignal.any([timeout, shutdown.signal]),
        headersTimeout: settings.timeoutMs,
        bodyTimeout: settings.timeoutMs,
      });
      // What the endpoint says is not read beyond a few KiB; nothing of it is kept.
      let read = 0;
      for await (const chunk of response.body) {
        read += (chunk as Buffer).length;
        if (read > responseReadCap) break;
      }
      const status = response.statusCode;
      const outcome: AttemptOutcome = status >= 200 && status < 300 ? 'success' : status === 410 ? 'gone' : 'http_error';
      return { outcome, statusCode: status, retryAfter: retryAfterMs(response.headers['retry-after']) };
    } catch (error) {
      if (shutdown.signal.aborted) throw error;
      return { outcome: outcomeOfError(error, timeout.aborted), statusCode: null };
    }
  }

  async function attempt(claim: ClaimedDelivery): Promise<void> {
    const attemptedAt = new Date();
    const started = performance.now();
    const result = await send(claim);
    const durationMs = Math.round(performance.now() - started);
    metrics.webhooks.attempts.inc({ outcome: result.outcome });
    metrics.webhooks.attemptDuration.observe({ outcome: result.outcome }, durationMs / 1000);
    const retryInMs =
      result.outcome === 'success' || result.outcome === 'gone'
        ? undefined
        : nextAttemptInMs(settings.retryScheduleMs, claim.attempts + 1 - claim.scheduleStart, result.retryAfter);
    const recorded = await store.recordAttempt(claim, {
      attemptedAt,
      statusCode: result.statusCode,
      outcome: result.outcome,
      durationMs,
      retryInMs,
      gone: result.outcome === 'gone',
      disableAfterFailingMs,
    });
    const fields = {
      deliveryId: claim.id,
      eventId: claim.eventId,
      endpointId: claim.endpointId,
      networkId: claim.networkId,
      attempt: claim.attempts + 1,
      outcome: result.outcome,
      statusCode: result.statusCode,
      durationMs,
    };
    if (!recorded.recorded) {
      log.warn(fields, 'webhook attempt made after its lease ran out; another replica owns the delivery');
      return;
    }
    if (recorded.state === 'succeeded') metrics.webhooks.deliveries.inc({ outcome: 'succeeded' });
    if (recorded.state === 'failed') metrics.webhooks.deliveries.inc({ outcome: 'failed' });
    if (recorded.disabled) {
      metrics.webhooks.endpointsDisabled.inc({ reason: recorded.disabled });
      log.warn({ ...fields, reason: recorded.disabled }, 'webhook endpoint disabled');
    }
    if (result.outcome === 'success') log.debug(fields, 'webhook delivered');
    else log.info({ ...fields, nextAttemptInMs: retryInMs ?? null }, 'webhook attempt failed');
  }

  function start(claim: ClaimedDelivery): void {
    const run = attempt(claim)
      .catch((error: unknown) => {
        if (shutdown.signal.aborted) return;
        // The record did not reach the database: the lease runs out and the delivery is tried again.
        log.warn(
          { deliveryId: claim.id, reason: (error as Error).message, ...sqlstateFields(error) },
          'webhook attempt could not be recorded; it is tried again once its lease ends',
        );
      })
      .finally(() => {
        running.delete(run);
        // A slot is free: more of what is due may be taken at once.
        nudge();
      });
    running.add(run);
  }

  /**
   * Claims what is due, up to the free slots. `withStats` (the timed polls) first reads the figures
   * of the gauges, and claims only when something is pending; a nudge (an attempt ended, events
   * were relayed) claims at once.
   */
  async function poll(withStats = true): Promise<void> {
    try {
      if (withStats && performance.now() - lastPrune >= pruneIntervalMs) {
        lastPrune = performance.now();
        const pruned = await store.prune(retentionMs, pruneBatch);
        if (pruned > 0) log.info({ count: pruned }, 'finished webhook deliveries older than 30 days deleted');
      }
      if (withStats) {
        const stats = await store.stats();
        metrics.webhooks.pending.set(stats.pending);
        metrics.webhooks.oldestDueAge.set(stats.oldestDueAgeSeconds);
        if (stats.pending === 0) return;
      }
      const free = settings.concurrency - running.size;
      if (stopped || free <= 0) return;
      const claims = await store.claimDue(deps.owner, leaseMs, free, { perEndpoint: perEndpointInFlight, perNetwork: perNetworkInFlight });
      for (const claim of claims) start(claim);
    } catch (error) {
      log.warn({ reason: (error as Error).message, ...sqlstateFields(error) }, 'webhook sender could not poll; trying again');
    }
  }

  function runPoll(withStats: boolean): void {
    polling = poll(withStats).finally(() => {
      polling = undefined;
      if (pollAgain && !stopped) {
        pollAgain = false;
        runPoll(false);
      }
    });
  }

  /**
   * A claim soon (new deliveries, or a free slot): after a few milliseconds, so that the slots
   * freed meanwhile are filled by one claim; after the poll under way when there is one.
   */
  function nudge(): void {
    if (stopped || nudged) return;
    nudged = setTimeout(() => {
      nudged = undefined;
      if (polling) pollAgain = true;
      else runPoll(false);
    }, nudgeDelayMs);
  }

  function schedule(): void {
    if (stopped) return;
    timer = setTimeout(
      () => {
        if (polling) pollAgain = true;
        else runPoll(true);
        schedule();
      },
      settings.pollIntervalMs * (0.5 + Math.random()),
    );
  }

  return {
    start(): void {
      stopped = false;
      runPoll(true);
      schedule();
    },
    nudge,
    /**
     * Claims nothing more; attempts under way may finish until `deadline` (performance.now()
     * time), then are cut off, and every lease this replica still holds is given back at once.
     */
    async stop(deadline = performance.now()): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      clearTimeout(nudged);
      await polling;
      const late = setTimeout(() => shutdown.abort(), Math.max(0, deadline - performance.now()));
      while (running.size > 0) await Promise.allSettled([...running]);
      clearTimeout(late);
      const released = await store.releaseOwned(deps.owner).catch(() => 0);
      if (released > 0) log.info({ count: released }, 'released webhook deliveries for another replica');
      await agent.close();
    },
  };
}
