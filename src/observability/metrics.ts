import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import { feedMetrics } from './feed-metrics.js';
import { webhookMetrics } from './webhook-metrics.js';

/**
 * Every Prometheus series the service exports, on one registry owned by the app (never the
 * global one, so several apps in one test process do not collide). Labels are bounded: the route
 * template, never the URL; the partner's `name` from the key record, never the key.
 */
export type Metrics = ReturnType<typeof createMetrics>;

export type DependencyName = 'postgres' | 'redis' | 'spend_management' | 'secrets_manager';
export type BreakerState = 'closed' | 'half_open' | 'open';
export const breakerStateValue: Record<BreakerState, number> = { closed: 0, half_open: 1, open: 2 };

/** How far ahead `partner_keys_expiring_soon` looks (docs/interfaces.md §12). */
const keyExpiryWarningMs = 14 * 24 * 3600 * 1000;

// 5 ms to 5 s, with enough resolution around the p99 objective (250 ms) to alert on it.
const latencyBuckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** What the key metrics read of the served key set (src/auth/partner-keys.ts's KeySet has this shape). */
type ServedKeys = ReadonlyMap<string, { partner: { name: string }; expiresAt?: number; weakness?: string }>;

/** The key set the key metrics read, and when it was last loaded well (set by markGoodKeyLoad). */
interface KeyState {
  lastGoodLoad: number | undefined;
  served: ServedKeys;
}

/** The partner requests: their latency, the status changes and what they paused, the 401s. */
function requestMetrics(registry: Registry) {
  return {
    httpRequestDuration: new Histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP requests served, by method, route template and status code.',
      labelNames: ['method', 'route', 'status_code'] as const,
      buckets: latencyBuckets,
      registers: [registry],
    }),
    agentStatusChanges: new Counter({
      name: 'agent_status_changes_total',
      help: 'Agent status requests by partner, requested state and outcome (updated, not_found, failed).',
      labelNames: ['partner', 'enabled', 'outcome'] as const,
      registers: [registry],
    }),
    campaignsPaused: new Counter({
      name: 'campaigns_paused_total',
      help: 'Campaigns moved from unpaused to paused in the database by agent disables (requests and the worker), by partner.',
      labelNames: ['partner'] as const,
      registers: [registry],
    }),
    authFailures: new Counter({
      name: 'auth_failures_total',
      help: 'Requests refused with 401, by reason (missing, unknown).',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
  };
}

/** The dependencies: each call, its failures, the circuit breakers. */
function dependencyMetrics(registry: Registry) {
  return {
    dependencyDuration: new Histogram({
      name: 'dependency_request_duration_seconds',
      help: 'Calls to a dependency, by dependency, operation and outcome (ok, error, rejected by an open breaker).',
      labelNames: ['dependency', 'operation', 'outcome'] as const,
      buckets: latencyBuckets,
      registers: [registry],
    }),
    dependencyErrors: new Counter({
      name: 'dependency_errors_total',
      help: 'Failed calls to a dependency, by dependency and class (timeout, unavailable, bad_response, unauthorized, constraint, error).',
      labelNames: ['dependency', 'reason'] as const,
      registers: [registry],
    }),
    breakerState: new Gauge({
      name: 'circuit_breaker_state',
      help: 'Circuit breaker state per dependency: 0 closed, 1 half-open, 2 open.',
      labelNames: ['breaker'] as const,
      registers: [registry],
    }),
    breakerEvents: new Counter({
      name: 'circuit_breaker_events_total',
      help: 'Circuit breaker events per dependency (success, failure, timeout, reject, open, half_open, close).',
      labelNames: ['breaker', 'event'] as const,
      registers: [registry],
    }),
  };
}

/** The partner key set: its loads, its age, the keys used, expiring and weak. */
function keyMetrics(registry: Registry, keys: KeyState) {
  return {
    partnerKeysLoaded: new Gauge({
      name: 'partner_keys_loaded',
      help: 'Partner API keys in the key set currently served.',
      registers: [registry],
    }),
    partnerKeyReloads: new Counter({
      name: 'partner_keys_reloads_total',
      help: 'Partner key set loads by source (file, secrets_manager) and outcome (success, invalid, error).',
      labelNames: ['source', 'outcome'] as const,
      registers: [registry],
    }),
    partnerKeysLastGoodLoad: new Gauge({
      name: 'partner_keys_last_good_load_timestamp_seconds',
      help: 'Unix time of the last successful partner key set load.',
      registers: [registry],
    }),
    partnerKeysAge: new Gauge({
      name: 'partner_keys_seconds_since_last_good_load',
      help: 'Seconds since the partner key set was last loaded successfully.',
      registers: [registry],
      collect() {
        if (keys.lastGoodLoad !== undefined) this.set((Date.now() - keys.lastGoodLoad) / 1000);
      },
    }),
    partnerKeysLastLoadFailed: new Gauge({
      name: 'partner_keys_last_load_failed',
      help: '1 while the latest partner key set load from a source failed or was rejected (the last good set is served), 0 after a good one.',
      labelNames: ['source'] as const,
      registers: [registry],
    }),
    partnerRequestsAuthenticated: new Counter({
      name: 'partner_requests_authenticated_total',
      help: 'Requests whose key was accepted, by key name (partner): shows whether a key is still used before it is revoked.',
      labelNames: ['partner'] as const,
      registers: [registry],
    }),
    apiVersionAnswers: new Counter({
      name: 'partner_api_version_answers_total',
      help: 'Answers after authentication, by key name (partner) and the API version they were given in (api_version: a version of the table, or unsupported for the 400 of an unknown or sunset one): shows who still uses a deprecated version.',
      labelNames: ['partner', 'api_version'] as const,
      registers: [registry],
    }),
    partnerKeysExpiringSoon: new Gauge({
      name: 'partner_keys_expiring_soon',
      help: 'Keys in the served set that expire within 14 days (state expiring) or have expired and are refused (state expired), by name (partner).',
      labelNames: ['partner', 'state'] as const,
      registers: [registry],
      collect() {
        this.reset();
        const now = Date.now();
        for (const { partner, expiresAt } of keys.served.values()) {
          if (expiresAt === undefined || expiresAt - now > keyExpiryWarningMs) continue;
          this.inc({ partner: partner.name, state: now >= expiresAt ? 'expired' : 'expiring' });
        }
      },
    }),
    partnerKeysWeak: new Gauge({
      name: 'partner_keys_weak',
      help: 'Raw keys in the served set that are shorter than 32 characters (reason short) or not in the issued format (reason unformatted), by name (partner).',
      labelNames: ['partner', 'reason'] as const,
      registers: [registry],
    }),
  };
}

/** Readiness, and the disables that go on after their request: the queue, the call record, the worker. */
function disableMetrics(registry: Registry) {
  return {
    ready: new Gauge({
      name: 'service_ready',
      help: '1 while the service answers /readyz with 200, 0 otherwise.',
      registers: [registry],
    }),
    pendingDisables: new Gauge({
      name: 'pending_disables',
      help: "Accepted disables not yet finished (rows of pending_disables), as last read by this replica's worker.",
      registers: [registry],
    }),
    pendingDisablesOldestAge: new Gauge({
      name: 'pending_disables_oldest_age_seconds',
      help: "Age of the oldest unfinished disable (since it was first requested), 0 when none; as last read by this replica's worker.",
      registers: [registry],
    }),
    unsettledCampaigns: new Gauge({
      name: 'unsettled_campaigns',
      help: "Campaigns sent to spend management whose pause is not yet settled in Redis and the database (campaigns of the calls in the call record pause_calls, calls in flight included), as last read by this replica's worker.",
      registers: [registry],
    }),
    unsettledCampaignsOldestAge: new Gauge({
      name: 'unsettled_campaigns_oldest_age_seconds',
      help: "Age of the oldest unsettled campaign's record (since its call was recorded), 0 when none; as last read by this replica's worker.",
      registers: [registry],
    }),
    unsettledCampaignsSettled: new Counter({
      name: 'unsettled_campaigns_settled_total',
      help: "Campaigns of the call record that this replica's worker settled (paused in Redis and marked in the database) for a run that could not.",
      registers: [registry],
    }),
    workerAttempts: new Counter({
      name: 'disable_worker_attempts_total',
      help: 'Convergence worker runs of pending disables, by outcome (completed, incomplete, failed, superseded, stopped).',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    backgroundLoopClaimed: new Counter({
      name: 'background_loop_claimed_total',
      help: 'Items a background poll loop of this replica claimed, by loop (convergence, write_ahead_settling).',
      labelNames: ['loop'] as const,
      registers: [registry],
    }),
    backgroundLoopFailures: new Counter({
      name: 'background_loop_failures_total',
      help: 'Failures of the background loops, by loop and stage: a claim that failed (claim), a work that crashed (work), or a housekeeping chore (its name).',
      labelNames: ['loop', 'stage'] as const,
      registers: [registry],
    }),
    campaignsNotConfirmed: new Counter({
      name: 'campaigns_not_confirmed_total',
      help: 'Campaigns a store answered about but did not confirm paused (left out by spend management, refused by Redis); retried by the worker.',
      labelNames: ['dependency'] as const,
      registers: [registry],
    }),
    spendManagementAuthFailures: new Counter({
      name: 'spend_management_auth_failures_total',
      help: 'Spend-management answers 401 or 403: our credentials are wrong or lack the permission.',
      labelNames: ['status'] as const,
      registers: [registry],
    }),
  };
}

/** What the partner API refused, shaped or did not log: limits, conveniences, load shedding, probes. */
function guardMetrics(registry: Registry) {
  return {
    requestsLimited: new Counter({
      name: 'partner_requests_limited_total',
      help: 'Requests answered 429, by partner and limit (rate: requests per window; disables_in_flight: concurrent disables; idempotency_keys: the network holds its quota of Idempotency-Keys).',
      labelNames: ['partner', 'limit'] as const,
      registers: [registry],
    }),
    batchSize: new Histogram({
      name: 'agent_status_batch_size',
      help: 'Bulk status changes (POST /partner/agents/status/batch) made, by partner: the changes each held.',
      labelNames: ['partner'] as const,
      buckets: [1, 5, 10, 50, 100, 250, 500, 1000],
      registers: [registry],
    }),
    batchItems: new Counter({
      name: 'agent_status_batch_items_total',
      help: 'Changes of bulk status changes answered, by partner, requested state and the status the single call would have answered (200, 202, 404, 409, 500).',
      labelNames: ['partner', 'enabled', 'status'] as const,
      registers: [registry],
    }),
    convenienceAnswers: new Counter({
      name: 'partner_convenience_answers_total',
      help: 'Answers shaped by the partner conveniences, by route and answer (replayed: an Idempotency-Key repeat; key_in_use: 409; key_reused: 422; key_quota: 429, the network holds its quota of keys; precondition_failed: 412 to If-Match; accepted: 202 to Prefer: respond-async).',
      labelNames: ['route', 'answer'] as const,
      registers: [registry],
    }),
    rateLimitStoreErrors: new Counter({
      name: 'rate_limit_store_errors_total',
      help: 'Rate-limit checks that could not reach Redis; the request was let through (the limit fails open).',
      registers: [registry],
    }),
    requestsShed: new Counter({
      name: 'requests_shed_total',
      help: 'Partner requests answered 503 because the process was overloaded (event-loop delay over the threshold).',
      registers: [registry],
    }),
    logLinesSuppressed: new Counter({
      name: 'log_lines_suppressed_total',
      help: 'Access log lines not written because their kind is logged at a bounded rate (reason: auth_failure).',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
    suspiciousRequests: new Counter({
      name: 'suspicious_requests_total',
      help: 'Requests that sent something only a probe would, by reason (key_shaped_request_id: an x-request-id holding a key-shaped run, replaced by a fresh id). Never holds what was sent.',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
  };
}

/** Leaving a PostgreSQL server that failed over. */
function failoverMetrics(registry: Registry) {
  return {
    postgresFailovers: new Counter({
      name: 'postgres_failovers_total',
      help: 'Times this replica left the PostgreSQL server its connections were on, by reason (read_only: a write answered 25006 or readiness found the server read-only; terminated: 57P01-57P03; connection_lost: class 08, a reset or unanswering connection). Each retires every connection opened before it, in all pools.',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
    postgresConnectionsRetired: new Counter({
      name: 'postgres_connections_retired_total',
      help: 'PostgreSQL connections closed (idle) or marked to close on release (busy) because the replica left their server.',
      registers: [registry],
    }),
    redisWaitReplicas: new Gauge({
      name: 'redis_wait_replicas',
      help: 'Replicas a batch written to Redis must reach (WAIT) before it counts as paused: REDIS_WAIT_REPLICAS, or with `connected` the replicas the primary last said it has (0: no WAIT).',
      registers: [registry],
    }),
    redisFailovers: new Counter({
      name: 'redis_failovers_total',
      help: 'Times the Redis server behind REDIS_URL was found replaced (another run_id or replication id: a failover, or a restart that may have lost writes).',
      registers: [registry],
    }),
    redisReasserts: new Counter({
      name: 'redis_failover_reasserts_total',
      help: 'Re-assertions in Redis of the campaigns PostgreSQL records as paused by recent disables, after a Redis failover, by outcome (ok, failed: tried again at the next check).',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    redisReassertedCampaigns: new Counter({
      name: 'redis_failover_reasserted_campaigns_total',
      help: 'Campaigns marked paused in Redis again after a Redis failover because PostgreSQL records them as paused.',
      registers: [registry],
    }),
  };
}

/** The events of docs/interfaces.md §14: the snapshot batches and their relay (src/events/event-relay.ts, docs/events-order.md). */
function eventMetrics(registry: Registry) {
  return {
    eventsBacklog: new Gauge({
      name: 'events_backlog',
      help: 'Events waiting, by stage: batches (committed, in no batch yet), nats (in batches not yet published to NATS), outbox (rows of event_outbox from before the batches, not relayed), as last read by the replica holding the batches (0 elsewhere).',
      labelNames: ['stage'] as const,
      registers: [registry],
    }),
    eventsOldestAge: new Gauge({
      name: 'events_oldest_waiting_age_seconds',
      help: 'Age of the oldest event waiting (0 when none), by stage as events_backlog, as last read by the replica holding the batches (0 elsewhere).',
      labelNames: ['stage'] as const,
      registers: [registry],
    }),
    eventsRelayHolder: new Gauge({
      name: 'events_relay_holder',
      help: 'Whether this replica holds the relay lease of a role: batches (takes the batches, feeds the webhooks) or nats (publishes them); one holder a role per deployment.',
      labelNames: ['role'] as const,
      registers: [registry],
    }),
    eventsBatched: new Counter({
      name: 'events_batched_total',
      help: 'Events taken into batches (each batch recorded with its webhook deliveries) by this replica.',
      registers: [registry],
    }),
    eventsPublishDuration: new Histogram({
      name: 'events_publish_duration_seconds',
      help: "Publishes of events to NATS JetStream that the stream acknowledged, from the publish to the stream's acknowledgement.",
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [registry],
    }),
    eventsRelayLag: new Histogram({
      name: 'events_relay_lag_seconds',
      help: "Events relayed, from their time (the change row's, stamped after the agent's change lock, a few ms before its commit) to the stream's acknowledgement (stage nats) or, on a replica without a broker, to their batch (stage batches).",
      labelNames: ['stage'] as const,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: [registry],
    }),
    eventsPublished: new Counter({
      name: 'events_published_total',
      help: 'Events the stream acknowledged, by whether it already had their id (duplicate: published again after a mark was lost).',
      labelNames: ['duplicate'] as const,
      registers: [registry],
    }),
    eventsPublishFailures: new Counter({
      name: 'events_publish_failures_total',
      help: 'Publishes of events that were not acknowledged, by reason (not_connected, timeout, no_stream, rejected, invalid); the events wait in their batches.',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
  };
}

export function createMetrics(options: { collectDefaults?: boolean } = {}) {
  const registry = new Registry();
  if (options.collectDefaults !== false) collectDefaultMetrics({ register: registry });

  const keys: KeyState = { lastGoodLoad: undefined, served: new Map() };

  const metrics = {
    registry,
    /** Partner webhooks (src/observability/webhook-metrics.ts). */
    webhooks: webhookMetrics(registry),
    /** The partner events feed (src/observability/feed-metrics.ts). */
    feed: feedMetrics(registry),
    ...requestMetrics(registry),
    ...dependencyMetrics(registry),
    ...keyMetrics(registry, keys),
    ...disableMetrics(registry),
    ...guardMetrics(registry),
    ...failoverMetrics(registry),
    ...eventMetrics(registry),
    markGoodKeyLoad(served: ServedKeys, at = Date.now()) {
      keys.lastGoodLoad = at;
      metrics.partnerKeysLoaded.set(served.size);
      metrics.partnerKeysLastGoodLoad.set(at / 1000);
      // Series per key name: new names start at 0, names no longer in the set go away, so the
      // label values stay bounded by the keys served.
      const names = new Set([...served.values()].map((entry) => entry.partner.name));
      for (const name of new Set([...keys.served.values()].map((entry) => entry.partner.name))) {
        if (!names.has(name)) metrics.partnerRequestsAuthenticated.remove({ partner: name });
      }
      for (const partner of names) metrics.partnerRequestsAuthenticated.inc({ partner }, 0);
      metrics.partnerKeysWeak.reset();
      for (const { partner, weakness } of served.values()) {
        if (weakness) metrics.partnerKeysWeak.inc({ partner: partner.name, reason: weakness });
      }
      keys.served = served;
    },
  };
  // Known label sets start at 0, so the first event is an increase that rate() and increase() see.
  for (const reason of ['missing', 'unknown']) metrics.authFailures.inc({ reason }, 0);
  for (const reason of ['not_connected', 'timeout', 'no_stream', 'rejected', 'invalid']) metrics.eventsPublishFailures.inc({ reason }, 0);
  for (const role of ['batches', 'nats']) metrics.eventsRelayHolder.set({ role }, 0);
  for (const reason of ['read_only', 'terminated', 'connection_lost']) metrics.postgresFailovers.inc({ reason }, 0);
  for (const outcome of ['completed', 'incomplete', 'failed', 'superseded', 'stopped']) metrics.workerAttempts.inc({ outcome }, 0);
  for (const dependency of ['spend_management', 'redis', 'postgres']) metrics.campaignsNotConfirmed.inc({ dependency }, 0);
  for (const status of ['401', '403']) metrics.spendManagementAuthFailures.inc({ status }, 0);
  metrics.rateLimitStoreErrors.inc(0);
  metrics.requestsShed.inc(0);
  metrics.logLinesSuppressed.inc({ reason: 'auth_failure' }, 0);
  metrics.suspiciousRequests.inc({ reason: 'key_shaped_request_id' }, 0);
  metrics.pendingDisables.set(0);
  metrics.pendingDisablesOldestAge.set(0);
  metrics.unsettledCampaigns.set(0);
  metrics.unsettledCampaignsOldestAge.set(0);
  metrics.unsettledCampaignsSettled.inc(0);
  for (const breaker of ['spend_management', 'redis']) {
    for (const event of ['success', 'failure', 'timeout', 'reject', 'open', 'half_open', 'close']) {
      metrics.breakerEvents.inc({ breaker, event }, 0);
    }
  }
  return metrics;
}

/** Starts the reload series of one key source at 0 (called by the source that is configured). */
export function initKeySourceMetrics(metrics: Metrics, source: 'file' | 'secrets_manager') {
  for (const outcome of ['success', 'invalid', 'error']) metrics.partnerKeyReloads.inc({ source, outcome }, 0);
  metrics.partnerKeysLastLoadFailed.set({ source }, 0);
}
