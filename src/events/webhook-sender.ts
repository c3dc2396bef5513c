import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { Agent } from 'undici';
import type { WebhookSettings } from '../config.js';
import { sqlstateFields } from '../observability/dependency-calls.js';
import type { Metrics } from '../observability/metrics.js';
import type { AttemptOutcome } from '../observability/webhook-metrics.js';
import type { ClaimedDelivery, WebhookDeliveryStore } from '../stores/webhook-deliveries.js';
import { type Chore, Housekeeping } from '../workers/housekeeping.js';
import { PollLoop } from '../workers/poll-loop.js';
import { allowedRanges, ForbiddenAddress, guardedConnector, type Lookup } from './address-guard.js';
import { dnsQuery } from './webhook-resolver.js';
import { signedHeaders } from './webhook-signature.js';

/** Deliveries of one endpoint under way at once, across replicas. */
const perEndpointInFlight = 4;
/** The most of a response the sender reads; the rest is dropped with the connection. */
const responseReadCap = 64 * 1024;
/** An endpoint whose every attempt failed for this long is disabled. */
const disableAfterFailingMs = 5 * 24 * 3600 * 1000;
/** How long a finished delivery stays in the history (and can be sent again). */
const retentionMs = 30 * 24 * 3600 * 1000;
/** How often the sender prunes, forgets expired secrets and closes idle dispatchers. */
const housekeepingIntervalMs = 10_000;
/**
 * Each round prunes batches until one comes back short or this time is up: up to a few thousand
 * rows a second a replica, far above what the per-network bounds let the fan-out write.
 */
const pruneRoundMs = 2_000;
const pruneBatch = 1_000;
/** How often the gauges' figures (a count of what waits) are read. */
const statsIntervalMs = 15_000;
/** An endpoint's dispatcher is closed after this long with no attempt. */
const dispatcherIdleMs = 60_000;
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
  /** DNS resolution of endpoint hosts: a stub (tests), or by default the name servers of WEBHOOK_DNS_SERVERS (or the system's). */
  resolve?: Lookup;
}

/**
 * undici, loaded with the first delivery: most replicas of most deployments never send a webhook,
 * and loading it cost about 18 ms of every start (a CPU profile of the start, 2026-11-29).
 */
let undici: Promise<typeof import('undici')> | undefined;
function loadUndici(): Promise<typeof import('undici')> {
  undici ??= import('undici').catch((error: unknown) => {
    undici = undefined; // tried again by the next delivery
    throw error;
  });
  return undici;
}

/** A dispatcher of one endpoint's own, and when it was last used. */
interface EndpointDispatcher {
  agent: Agent;
  lastUsed: number;
}

/**
 * The webhook sender of docs/interfaces.md §14, one per replica, as instances of src/workers/ like
 * the convergence worker. Its poll loop, every poll (with jitter), whenever an attempt ends and
 * whenever nudged, claims due deliveries up to its free capacity, spread over networks and bounded
 * per endpoint and per network (WEBHOOK_NETWORK_MAX_IN_FLIGHT), so that one network's slow or
 * failing endpoint never holds the capacity another network's deliveries need. Each endpoint has
 * connections of its own (never a pool per origin that every network on a shared host would queue
 * for), as many as it may have attempts under way: an attempt never waits for a connection, so its
 * time-out counts from the moment the request goes out. Each claim is a lease longer than an
 * attempt can last; the attempt's record is fenced by it; a replica that dies leaves its leases to
 * run out, and its deliveries are attempted again, with the same webhook-id, by any replica. Its
 * housekeeping (off the claim path) prunes, forgets expired secrets, closes idle dispatchers and
 * reads the gauges. The service starts and stops both loops through its resources.
 */
export class WebhookSender {
  private readonly shutdown = new AbortController();
  private readonly dispatchers = new Map<string, EndpointDispatcher>();
  private readonly connectorOptions: Parameters<typeof guardedConnector>[0];
  private readonly delivering: PollLoop<ClaimedDelivery>;
  private readonly housekeeping: Housekeeping;
  private stopping: Promise<void> | undefined;

  constructor(private readonly deps: WebhookSenderDeps) {
    const { settings, log, metrics } = deps;
    const allowed = settings.allowedCidrs.length > 0 ? allowedRanges(settings.allowedCidrs) : undefined;
    this.connectorOptions = { allowed, allowedPorts: settings.allowedPorts, connectTimeoutMs: settings.timeoutMs, resolve: deps.resolve };
    this.delivering = new PollLoop<ClaimedDelivery>(
      {
        name: 'webhooks',
        claim: (free, leaseMs) => this.claim(free, leaseMs),
        work: (claim) => this.work(claim),
        describe: (claim) => ({ deliveryId: claim.id, endpointId: claim.endpointId, networkId: claim.networkId }),
      },
      {
        pollIntervalMs: settings.pollIntervalMs,
        concurrency: settings.concurrency,
        leaseMs: deps.leaseMs,
        // A slot that frees may be filled at once; slots freed together are filled by one claim.
        claimWhenFreed: true,
        nudgeDelayMs,
      },
      { log, metrics },
    );
    // Looked at every poll interval, so each chore runs close to its period (the pruning rate).
    this.housekeeping = new Housekeeping(this.chores(), { log, metrics, name: 'webhook_housekeeping', tickMs: settings.pollIntervalMs });
  }

  /** The loops, for the service's resources (started in this order, stopped in reverse). */
  get loops(): readonly [Housekeeping, PollLoop<ClaimedDelivery>] {
    return [this.housekeeping, this.delivering];
  }

  /** A claim soon (new deliveries): after a few milliseconds, so that what comes together is claimed together. */
  readonly nudge = (): void => this.delivering.nudge();

  /**
   * The endpoint's own dispatcher: its connections serve it alone, and its names are resolved on
   * a resolver (c-ares channel) of its own, so that names of another endpoint that time out leave
   * no mark on its lookups.
   */
  private dispatcherOf(endpointId: string, { Agent: Dispatcher, buildConnector }: typeof import('undici')): Agent {
    let entry = this.dispatchers.get(endpointId);
    if (!entry) {
      const { dnsServers, dnsTimeoutMs } = this.deps.settings;
      const connect = guardedConnector(
        {
          ...this.connectorOptions,
          ...(this.deps.resolve ? {} : { query: dnsQuery({ servers: dnsServers, timeoutMs: dnsTimeoutMs }) }),
        },
        buildConnector,
      );
      entry = { agent: new Dispatcher({ connect, keepAliveTimeout: 4_000, connections: perEndpointInFlight }), lastUsed: 0 };
      this.dispatchers.set(endpointId, entry);
    }
    entry.lastUsed = performance.now();
    return entry.agent;
  }

  /** Closes the dispatchers of endpoints with no attempt for a while. */
  private closeIdleDispatchers(): void {
    const idleSince = performance.now() - dispatcherIdleMs;
    for (const [endpointId, entry] of this.dispatchers) {
      if (entry.lastUsed < idleSince) {
        this.dispatchers.delete(endpointId);
        void entry.agent.close().catch(() => {});
      }
    }
  }

  /** The due deliveries the loop may start, up to its free slots, within the per-endpoint and per-network bounds. */
  private async claim(free: number, leaseMs: number): Promise<readonly ClaimedDelivery[]> {
    const { claims, heldBack } = await this.deps.store.claimDue(this.deps.owner, leaseMs, free, {
      perEndpoint: perEndpointInFlight,
      perNetwork: this.deps.settings.networkMaxInFlight,
    });
    if (heldBack > 0) this.deps.metrics.webhooks.networkInFlightBound.inc();
    return claims;
  }

  private async send(claim: ClaimedDelivery): Promise<{ outcome: AttemptOutcome; statusCode: number | null; retryAfter?: number }> {
    const { timeoutMs } = this.deps.settings;
    const at = new Date();
    const timeout = AbortSignal.timeout(timeoutMs);
    try {
      const lib = await loadUndici();
      const response = await lib.request(claim.url, {
        method: 'POST',
        dispatcher: this.dispatcherOf(claim.endpointId, lib),
        headers: {
          'content-type': 'application/json',
          'user-agent': 'partner-agent-status-webhooks',
          ...signedHeaders(claim.eventId, at, claim.body, claim.secrets),
        },
        body: claim.body,
        signal: AbortSignal.any([timeout, this.shutdown.signal]),
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
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
      if (this.shutdown.signal.aborted) throw error;
      return { outcome: outcomeOfError(error, timeout.aborted), statusCode: null };
    }
  }

  /** One claimed delivery's attempt, recorded; a record that does not reach the database leaves the lease to run out. */
  private async work(claim: ClaimedDelivery): Promise<void> {
    try {
      await this.attempt(claim);
    } catch (error) {
      if (this.shutdown.signal.aborted) return;
      // The record did not reach the database: the lease runs out and the delivery is tried again.
      this.deps.log.warn(
        { deliveryId: claim.id, reason: (error as Error).message, ...sqlstateFields(error) },
        'webhook attempt could not be recorded; it is tried again once its lease ends',
      );
    }
  }

  private async attempt(claim: ClaimedDelivery): Promise<void> {
    const { store, settings, metrics, log } = this.deps;
    const attemptedAt = new Date();
    const started = performance.now();
    const result = await this.send(claim);
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

  /**
   * The sender's upkeep, off the claim path: pruning finished deliveries in batches until none is
   * left over or the round's time is up (faster than any write rate the per-network bounds let
   * through), forgetting previous secrets past their overlap, closing idle dispatchers, and reading
   * the gauges' figures now and then (a count of every waiting delivery is no part of the claim's path).
   */
  private chores(): Chore[] {
    const { store, metrics, log } = this.deps;
    return [
      {
        name: 'webhook_deliveries_prune',
        everyMs: housekeepingIntervalMs,
        async run(stopped) {
          const deadline = performance.now() + pruneRoundMs;
          let pruned = 0;
          for (;;) {
            const batch = await store.prune(retentionMs, pruneBatch);
            pruned += batch;
            if (batch < pruneBatch || performance.now() > deadline || stopped()) break;
          }
          metrics.webhooks.pruned.inc(pruned);
          if (pruned > 0) log.info({ count: pruned }, 'finished webhook deliveries older than 30 days deleted');
        },
      },
      {
        name: 'webhook_expired_secrets',
        everyMs: housekeepingIntervalMs,
        async run() {
          const dropped = await store.dropExpiredSecrets();
          if (dropped > 0) log.info({ count: dropped }, 'previous webhook signing secrets past their overlap forgotten');
        },
      },
      { name: 'webhook_idle_dispatchers', everyMs: housekeepingIntervalMs, run: async () => this.closeIdleDispatchers() },
      {
        name: 'webhook_gauges',
        everyMs: statsIntervalMs,
        async run() {
          const stats = await store.stats();
          metrics.webhooks.pending.set(stats.pending);
          metrics.webhooks.oldestDueAge.set(stats.oldestDueAgeSeconds);
        },
      },
    ];
  }

  /**
   * Claims nothing more; attempts under way may finish until `deadline` (performance.now()
   * time), then are cut off, and every lease this replica still holds is given back at once.
   * Stopping twice stops once (the service's close, then its resources).
   */
  stop(deadline = performance.now()): Promise<void> {
    this.stopping ??= this.stopBy(deadline);
    return this.stopping;
  }

  private async stopBy(deadline: number): Promise<void> {
    await Promise.all([this.delivering.stop(), this.housekeeping.stop()]);
    const late = setTimeout(() => this.shutdown.abort(), Math.max(0, deadline - performance.now()));
    await this.delivering.drained();
    clearTimeout(late);
    const released = await this.deps.store.releaseOwned(this.deps.owner).catch(() => 0);
    if (released > 0) this.deps.log.info({ count: released }, 'released webhook deliveries for another replica');
    await Promise.all([...this.dispatchers.values()].map((entry) => entry.agent.close().catch(() => {})));
    this.dispatchers.clear();
  }
}

export function createWebhookSender(deps: WebhookSenderDeps): WebhookSender {
  return new WebhookSender(deps);
}
