import { isIP } from 'node:net';

/**
 * The service's whole configuration, read once from the environment (docs/interfaces.md §2 plus
 * the project's own tunables documented in docs/configuration.md). A missing or invalid variable throws a
 * ConfigError whose message names it; main.ts prints that one line and exits 1.
 */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

import { type Deprecations, InvalidDeprecationsError, parseDeprecations } from './api-versions.js';

/**
 * DATABASE_POOLER (docs/interfaces.md §2, §13): `none`, the service talks to PostgreSQL itself;
 * `transaction`, a pooler in transaction mode (PgBouncer) sits between, and two statements of one
 * client may run on different server connections.
 */
export type DatabasePooler = 'none' | 'transaction';

export type PartnerKeysSource =
  | { kind: 'file'; path: string; pollIntervalMs: number }
  | { kind: 'secrets-manager'; secretId: string; refreshIntervalMs: number };

export interface Config {
  port: number;
  metricsPort: number;
  host: string;
  databaseUrl: string;
  /** How many connections each of the replica's pools may open (docs/interfaces.md §13, "A connection budget"). */
  databaseConnections: DatabaseConnections;
  databaseStatementTimeoutMs: number;
  /**
   * DATABASE_IDLE_TIMEOUT_MS: how long a pool keeps an unused connection open. A connection closed
   * after it is opened again on the next statement (and its named statements prepared again).
   */
  databaseIdleTimeoutMs: number;
  /** DATABASE_POOLER: `transaction` behind PgBouncer in transaction mode (docs/interfaces.md §13). */
  databasePooler: DatabasePooler;
  /** One URL, or with `redisCluster` a comma-separated list of seed nodes (docs/interfaces.md §13). */
  redisUrl: string;
  /** REDIS_CLUSTER: REDIS_URL names a Redis Cluster. */
  redisCluster: boolean;
  redisKeyPrefix: string;
  redisCommandTimeoutMs: number;
  /**
   * Replicas that must acknowledge a batch's writes before it counts as paused in Redis (WAIT);
   * 0: none asked. For a Redis with replicas and automatic failover, so that a failover cannot
   * lose a `paused` the database then records. `connected` (the default): as many as the primary
   * says it has connected (INFO replication, checked every redisReplicationCheckIntervalMs), none
   * when it has none.
   */
  redisWaitReplicas: number | 'connected';
  redisWaitTimeoutMs: number;
  /** How often the replica asks Redis who it is and how many replicas it has (INFO). */
  redisReplicationCheckIntervalMs: number;
  /** After a Redis failover: how far back the disables go whose paused campaigns are marked paused in Redis again. */
  redisFailoverReassertWindowMs: number;
  spendManagementUrl: string;
  spendManagementToken: string | undefined;
  spendManagementTimeoutMs: number;
  breaker: BreakerSettings;
  partnerKeys: PartnerKeysSource;
  logLevel: string;
  drainDelayMs: number;
  shutdownTimeoutMs: number;
  limits: LimitSettings;
  pipeline: PipelineSettings;
  /**
   * Bulk status changes (docs/interfaces.md §16): BULK_STATEMENTS_IN_FLIGHT, the recording
   * statements one batch has in flight at once, and BULK_CALL_LINGER_MS, how long a shared
   * spend-management call smaller than 100 campaigns waits without a new part while agents of the
   * batch are still being recorded.
   */
  bulk: { statementsInFlight: number; callLingerMs: number };
  worker: WorkerSettings;
  secretsManager: SecretsManagerSettings;
  /** API_VERSION_DEPRECATIONS: which API versions are deprecated, when they sunset, where partners read about it. */
  apiVersionDeprecations: Deprecations;
  webhooks: WebhookSettings;
  events: EventsSettings;
  feed: FeedSettings;
}

/** The partner events feed (docs/interfaces.md §17). */
export interface FeedSettings {
  /** EVENTS_FEED_RETENTION_DAYS, in milliseconds: how long the feed serves an event (batches are pruned no sooner). */
  retentionMs: number;
  /** EVENTS_FEED_MAX_STREAMS: Server-Sent Events streams one network may hold open at once, across replicas. */
  maxStreamsPerNetwork: number;
  /** EVENTS_FEED_HEARTBEAT_MS: the longest a stream goes without a line (a comment when nothing happens). */
  heartbeatMs: number;
  /** EVENTS_FEED_POLL_INTERVAL_MS: how often a replica looks for new batches when it cannot LISTEN (behind a transaction pooler). */
  pollIntervalMs: number;
}

/** Partner webhooks (docs/interfaces.md §14). */
export interface WebhookSettings {
  /** WEBHOOK_ALLOW_HTTP: endpoints may use http (tests only; the chart never sets it). */
  allowHttp: boolean;
  /** WEBHOOK_ALLOWED_CIDRS: ranges the sender may reach although they are not public (tests only). */
  allowedCidrs: string[];
  /** WEBHOOK_RETRY_SCHEDULE: the gaps between consecutive attempts, in milliseconds. */
  retryScheduleMs: number[];
  /** WEBHOOK_TIMEOUT_MS: an attempt not answered 2xx by then failed. */
  timeoutMs: number;
  /** WEBHOOK_CONCURRENCY: attempts one replica makes at once. */
  concurrency: number;
  /** WEBHOOK_POLL_INTERVAL_MS: how often the sender looks for due deliveries. */
  pollIntervalMs: number;
  /** WEBHOOK_ALLOWED_PORTS: ports a webhook URL may name besides 443 (any port within allowedCidrs). */
  allowedPorts: number[];
  /** WEBHOOK_DNS_SERVERS: the name servers webhook hosts are resolved with; empty: the system's (resolv.conf). */
  dnsServers: string[];
  /** WEBHOOK_DNS_TIMEOUT_MS: one query's time-out (the resolver tries twice). */
  dnsTimeoutMs: number;
  /** WEBHOOK_DNS_LOOKUPS_PER_NETWORK: lookups of one network's webhook hosts under way at once in a replica. */
  dnsLookupsPerNetwork: number;
  /** WEBHOOK_NETWORK_MAX_PENDING: deliveries of one network waiting (pending) at most; more are dropped and counted. */
  networkMaxPending: number;
  /** WEBHOOK_NETWORK_MAX_IN_FLIGHT: attempts of one network under way at once, across replicas. */
  networkMaxInFlight: number;
  /** WEBHOOK_SECRETS_KEY or WEBHOOK_SECRETS_KEY_FILE: what the signing secrets' encryption key is derived from. */
  secretsKey: { kind: 'value'; value: string } | { kind: 'file'; path: string } | { kind: 'development' };
}

/** docs/interfaces.md §14: the outbox relay, and NATS JetStream when EVENTS_NATS_URL is set. */
export interface EventsSettings {
  /** EVENTS_NATS_URL (comma-separated servers); none: the relay only marks events relayed. */
  natsUrl: string | undefined;
  stream: string;
  subjectPrefix: string;
  createStream: boolean;
  /** The CloudEvents `source`, a URI. */
  source: string;
  publishTimeoutMs: number;
  relayPollIntervalMs: number;
  relayBatchSize: number;
  relayLeaseMs: number;
  relayRetryDelayMs: number;
  retentionMs: number;
}

/**
 * The replica's PostgreSQL connections, all pools together at most `max` (DATABASE_MAX_CONNECTIONS).
 * Each pool opens connections only as it needs them, up to its share.
 */
export interface DatabaseConnections {
  max: number;
  /** Partner requests (DATABASE_POOL_SIZE when set). */
  request: number;
  /** The convergence worker, its claims and its runs. */
  worker: number;
  /** The claim checks that requests' runs make inside spend-management slots. */
  claimChecks: number;
  /** /readyz's ping. */
  readiness: number;
}

/** The fewest connections a replica can work with: one per pool. */
const minDatabaseConnections = 4;

/**
 * How DATABASE_MAX_CONNECTIONS is divided (docs/interfaces.md §13): readiness 1; the worker 2 (1
 * below 6); the claim checks a quarter, 1 to 4; partner requests the rest. 17 (the default) gives
 * 10 + 2 + 4 + 1, the sizes the pools had before the budget existed.
 */
export function divideConnections(max: number): DatabaseConnections {
  const readiness = 1;
  const worker = max >= 6 ? 2 : 1;
  const claimChecks = Math.min(4, Math.max(1, Math.floor(max / 4)));
  return { max, request: max - readiness - worker - claimChecks, worker, claimChecks, readiness };
}

/**
 * DATABASE_MAX_CONNECTIONS and the older DATABASE_POOL_SIZE: with the pool size alone, the request
 * pool keeps that size and the others their full shares (the total is the pool size + 7, as before
 * the budget existed); with both, the request pool is the pool size and must fit in what the
 * budget leaves it.
 */
function databaseConnections(env: Env): DatabaseConnections {
  const maxSet = Boolean(env.DATABASE_MAX_CONNECTIONS?.trim());
  const poolSizeSet = Boolean(env.DATABASE_POOL_SIZE?.trim());
  const max = integer(env, 'DATABASE_MAX_CONNECTIONS', 17, minDatabaseConnections, 1_000);
  if (!poolSizeSet) return divideConnections(max);
  const request = integer(env, 'DATABASE_POOL_SIZE', 10, 1, 200);
  if (!maxSet) return { ...divideConnections(17), request, max: request + 7 };
  const shares = divideConnections(max);
  if (request > shares.request) {
    throw new ConfigError(
      `DATABASE_POOL_SIZE (${request}) must be at most ${shares.request}: DATABASE_MAX_CONNECTIONS (${max}) leaves that for requests after the worker (${shares.worker}), the claim checks (${shares.claimChecks}) and readiness (${shares.readiness}); set DATABASE_MAX_CONNECTIONS alone`,
    );
  }
  return { ...shares, request };
}

/** docs/interfaces.md §10. */
export interface LimitSettings {
  /** Requests one network may make per window, across replicas; 0 turns the limit off. */
  rateLimitMax: number;
  rateLimitWindowMs: number;
  /** Agents of one network that one replica disables at once (worker runs not counted). */
  disablesInFlightPerNetwork: number;
  /** A request answers by then at the latest (below the ingress's read time-out). */
  requestDeadlineMs: number;
  /** Mean event-loop delay above which the /partner routes shed load with 503. */
  overloadMaxEventLoopDelayMs: number;
  /** Event-loop utilisation (percent, last second) from which requests without a valid key are shed first; 100 never. */
  overloadUnauthenticatedUtilizationPercent: number;
  /** Idempotency-Keys one network may hold at once (each kept 24 hours); past it a new key gets 429. */
  idempotencyKeysPerNetwork: number;
}

/** How one disable pauses its campaigns. */
export interface PipelineSettings {
  /** Batches of one disable in flight at once. */
  batchesInFlight: number;
  /** Spend-management calls in flight at once in this replica, all disables together. */
  spendManagementMaxConcurrency: number;
  /**
   * The longest a worker's call waits for a spend-management slot while requests' calls keep
   * coming: past it, it goes before them (docs/interfaces.md §9's 60 s under any load).
   */
  workerCallMaxWaitMs: number;
}

/** The convergence worker of docs/interfaces.md §9. */
export interface WorkerSettings {
  pollIntervalMs: number;
  leaseMs: number;
  backoffBaseMs: number;
  backoffMaxMs: number;
  /** Pending disables one replica's worker runs at once. */
  concurrency: number;
  /**
   * The oldest claim-check answer a pause call may start on (from when the check was sent); an
   * enable that supersedes a disable answers no earlier than this after its commit.
   */
  claimCheckMaxAgeMs: number;
}

export interface SecretsManagerSettings {
  connectTimeoutMs: number;
  requestTimeoutMs: number;
  maxAttempts: number;
}

export interface BreakerSettings {
  /** Failures or time-outs in a row that open the breaker, whatever its window holds. */
  consecutiveFailures: number;
  errorThresholdPercentage: number;
  volumeThreshold: number;
  resetTimeoutMs: number;
  rollingWindowMs: number;
}

type Env = Record<string, string | undefined>;

const logLevels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

function required(env: Env, name: string): string {
  const value = env[name]?.trim();
  if (!value) throw new ConfigError(`${name} is required`);
  return value;
}

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(`${name} must be a whole number, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${value}`);
  return value;
}

/** A whole number in [min, max], or the word `fallback` (also when absent). */
function integerOr<T extends string>(env: Env, name: string, fallback: T, min: number, max: number): number | T {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === '' || raw === fallback) return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(`${name} must be "${fallback}" or a whole number, got "${raw}"`);
  return integer(env, name, 0, min, max);
}

/** true or false (also 1/0, yes/no); absent: `fallback`. */
function flag(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name]?.trim().toLowerCase();
  if (raw === undefined || raw === '') return fallback;
  if (['true', '1', 'yes'].includes(raw)) return true;
  if (['false', '0', 'no'].includes(raw)) return false;
  throw new ConfigError(`${name} must be true or false, got "${raw}"`);
}

/** One of `values`; absent: `fallback`. */
function oneOf<T extends string>(env: Env, name: string, values: readonly T[], fallback: T): T {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === '') return fallback;
  if (!(values as readonly string[]).includes(raw)) throw new ConfigError(`${name} must be one of ${values.join(', ')}, got "${raw}"`);
  return raw as T;
}

/** REDIS_URL: one URL, or in cluster mode a comma-separated list of seed nodes, each a URL. */
function redisUrl(env: Env, cluster: boolean): string {
  const value = required(env, 'REDIS_URL');
  if (!cluster) return url(env, 'REDIS_URL', ['redis:', 'rediss:']);
  for (const node of value.split(',')) url({ REDIS_URL: node }, 'REDIS_URL', ['redis:', 'rediss:']);
  return value;
}

function url(env: Env, name: string, protocols: string[]): string {
  const value = required(env, name);
  let parsed: URL;
  try {
    parsed = new URL(value);
  } catch {
    // The value may hold a password: name the variable, never echo it.
    throw new ConfigError(`${name} is not a valid URL`);
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(`${name} must use ${protocols.map((p) => p.replace(':', '://')).join(' or ')}`);
  }
  return value;
}

/** API_VERSION_DEPRECATIONS (docs/interfaces.md §15), refused at start when any entry is wrong. */
function apiVersionDeprecations(env: Env): Deprecations {
  try {
    return parseDeprecations(env.API_VERSION_DEPRECATIONS);
  } catch (error) {
    if (error instanceof InvalidDeprecationsError) throw new ConfigError(`API_VERSION_DEPRECATIONS ${error.message}`);
    throw error;
  }
}

/** Standard Webhooks' example schedule after the first attempt: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h. */
const defaultRetrySchedule = '5,300,1800,7200,18000,36000,36000';

function webhookSettings(env: Env): WebhookSettings {
  const schedule = env.WEBHOOK_RETRY_SCHEDULE?.trim() || defaultRetrySchedule;
  const gaps = schedule.split(',').map((gap) => gap.trim());
  if (gaps.length > 20 || gaps.some((gap) => !/^\d+(\.\d+)?$/.test(gap) || Number(gap) > 7 * 86_400)) {
    throw new ConfigError(
      `WEBHOOK_RETRY_SCHEDULE must be at most 20 comma-separated gaps in seconds (each at most a week), got "${schedule}"`,
    );
  }
  const cidrs = (env.WEBHOOK_ALLOWED_CIDRS ?? '')
    .split(',')
    .map((cidr) => cidr.trim())
    .filter(Boolean);
  for (const cidr of cidrs) {
    try {
      parseCidr(cidr);
    } catch (error) {
      throw new ConfigError(`WEBHOOK_ALLOWED_CIDRS: ${(error as Error).message}`);
    }
  }
  return {
    allowHttp: flag(env, 'WEBHOOK_ALLOW_HTTP', false),
    allowedCidrs: cidrs,
    retryScheduleMs: gaps.map((gap) => Math.round(Number(gap) * 1000)),
    timeoutMs: integer(env, 'WEBHOOK_TIMEOUT_MS', 15_000, 100, 60_000),
    concurrency: integer(env, 'WEBHOOK_CONCURRENCY', 32, 1, 1_000),
    pollIntervalMs: integer(env, 'WEBHOOK_POLL_INTERVAL_MS', 1_000, 20, 60_000),
    allowedPorts: webhookPorts(env),
    dnsServers: webhookDnsServers(env),
    dnsTimeoutMs: integer(env, 'WEBHOOK_DNS_TIMEOUT_MS', 1_500, 50, 10_000),
    dnsLookupsPerNetwork: integer(env, 'WEBHOOK_DNS_LOOKUPS_PER_NETWORK', 4, 1, 1_000),
    networkMaxPending: integer(env, 'WEBHOOK_NETWORK_MAX_PENDING', 10_000, 1, 10_000_000),
    networkMaxInFlight: integer(env, 'WEBHOOK_NETWORK_MAX_IN_FLIGHT', 8, 1, 1_000),
    secretsKey: webhookSecretsKey(env),
  };
}

/** The non-empty comma-separated items of a variable. */
function commaList(env: Env, name: string): string[] {
  return (env[name] ?? '')
    .split(',')
    .map((item) => item.trim())
    .filter(Boolean);
}

function webhookPorts(env: Env): number[] {
  const raw = commaList(env, 'WEBHOOK_ALLOWED_PORTS');
  for (const port of raw) {
    if (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65_535) {
      throw new ConfigError(`WEBHOOK_ALLOWED_PORTS must be comma-separated ports (1 to 65535), got "${port}"`);
    }
  }
  return raw.map(Number);
}

/** `address` or `address:port` (IPv6 as `[address]:port`), as node:dns setServers takes them. */
function webhookDnsServers(env: Env): string[] {
  const servers = commaList(env, 'WEBHOOK_DNS_SERVERS');
  for (const server of servers) {
    const match = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+))(?::(\d{1,5}))?$/.exec(server) ?? /^([0-9a-fA-F:]+)$/.exec(server);
    if (!match || isIP(match[1] ?? match[2] ?? '') === 0) {
      throw new ConfigError(`WEBHOOK_DNS_SERVERS must be comma-separated IP addresses (with :port, IPv6 in brackets), got "${server}"`);
    }
  }
  return servers;
}

/**
 * The secret the signing secrets are encrypted with: given as the partner keys are (a value, or a
 * file a Kubernetes Secret is mounted at). Required in production; elsewhere a fixed development
 * key stands in (npm run dev, tests), which the service says in its log at start.
 */
function webhookSecretsKey(env: Env): WebhookSettings['secretsKey'] {
  const value = env.WEBHOOK_SECRETS_KEY?.trim();
  const path = env.WEBHOOK_SECRETS_KEY_FILE?.trim();
  if (value && path) throw new ConfigError('WEBHOOK_SECRETS_KEY and WEBHOOK_SECRETS_KEY_FILE are both set; set at most one');
  if (value) {
    if (value.length < 32) throw new ConfigError('WEBHOOK_SECRETS_KEY must be at least 32 characters');
    return { kind: 'value', value };
  }
  if (path) return { kind: 'file', path };
  if (env.NODE_ENV === 'production') {
    throw new ConfigError(
      'WEBHOOK_SECRETS_KEY_FILE (or WEBHOOK_SECRETS_KEY) is required in production: it encrypts the webhook signing secrets',
    );
  }
  return { kind: 'development' };
}

/** CloudEvents `source` when EVENTS_SOURCE is not set. */
export const defaultEventSource = 'urn:partner-agent-status';

/** The events settings (docs/interfaces.md §14); the NATS names are checked as NATS takes them. */
function eventsSettings(env: Env): EventsSettings {
  const natsUrl = env.EVENTS_NATS_URL?.trim() || undefined;
  if (natsUrl) for (const server of natsUrl.split(',')) url({ EVENTS_NATS_URL: server }, 'EVENTS_NATS_URL', ['nats:', 'tls:']);
  const stream = env.EVENTS_STREAM?.trim() || 'PARTNER_AGENT_STATUS';
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(stream)) throw new ConfigError('EVENTS_STREAM must be 1 to 64 letters, digits, _ or -');
  const subjectPrefix = env.EVENTS_SUBJECT_PREFIX?.trim() || 'partner-agent-status';
  if (!/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(subjectPrefix)) {
    throw new ConfigError('EVENTS_SUBJECT_PREFIX must be dot-separated tokens of letters, digits, _ or -');
  }
  const source = env.EVENTS_SOURCE?.trim() || defaultEventSource;
  if (!URL.canParse(source)) throw new ConfigError('EVENTS_SOURCE must be an absolute URI');
  const publishTimeoutMs = integer(env, 'EVENTS_PUBLISH_TIMEOUT_MS', 2_000, 10, 60_000);
  const relayLeaseMs = integer(env, 'EVENTS_RELAY_LEASE_MS', 10_000, 100, 600_000);
  if (relayLeaseMs <= publishTimeoutMs) {
    throw new ConfigError(`EVENTS_RELAY_LEASE_MS (${relayLeaseMs}) must exceed EVENTS_PUBLISH_TIMEOUT_MS (${publishTimeoutMs})`);
  }
  return {
    natsUrl,
    stream,
    subjectPrefix,
    createStream: flag(env, 'EVENTS_CREATE_STREAM', false),
    source,
    publishTimeoutMs,
    relayPollIntervalMs: integer(env, 'EVENTS_RELAY_POLL_INTERVAL_MS', 50, 5, 60_000),
    relayBatchSize: integer(env, 'EVENTS_RELAY_BATCH_SIZE', 1_000, 1, 5_000),
    relayLeaseMs,
    relayRetryDelayMs: integer(env, 'EVENTS_RELAY_RETRY_DELAY_MS', 1_000, 10, 600_000),
    retentionMs: integer(env, 'EVENTS_RETENTION_MS', 86_400_000, 0, 30 * 86_400_000),
  };
}

/**
 * How much longer than the server's statement_timeout the client waits for an answer: a slow
 * statement still ends with the server's clean 57014, only a connection that stopped answering
 * trips the client's limit.
 */
export const statementClientMarginMs = 1_500;

export function loadConfig(env: Env = process.env): Config {
  const config = readConfig(env);
  // A run stuck on a statement must see its error before its lease runs out, so that it stops
  // before another replica takes the disable over (docs/interfaces.md §9).
  const statementLimitMs = config.databaseStatementTimeoutMs + statementClientMarginMs;
  if (statementLimitMs >= config.worker.leaseMs) {
    throw new ConfigError(
      `WORKER_LEASE_MS (${config.worker.leaseMs}) must exceed DATABASE_STATEMENT_TIMEOUT_MS + ${statementClientMarginMs} (${statementLimitMs}): a stuck statement must end before its lease`,
    );
  }
  return config;
}

function readConfig(env: Env): Config {
  const keysFile = env.PARTNER_KEYS_FILE?.trim();
  const keysSecretId = env.PARTNER_KEYS_SECRET_ID?.trim();
  if (keysFile && keysSecretId) {
    throw new ConfigError('PARTNER_KEYS_FILE and PARTNER_KEYS_SECRET_ID are both set; set exactly one');
  }
  if (!keysFile && !keysSecretId) {
    throw new ConfigError('PARTNER_KEYS_FILE or PARTNER_KEYS_SECRET_ID is required (exactly one)');
  }
  const partnerKeys: PartnerKeysSource = keysFile
    ? { kind: 'file', path: keysFile, pollIntervalMs: integer(env, 'PARTNER_KEYS_POLL_INTERVAL_MS', 5_000, 100, 10_000) }
    : {
        kind: 'secrets-manager',
        secretId: keysSecretId!,
        refreshIntervalMs: integer(env, 'PARTNER_KEYS_REFRESH_INTERVAL_MS', 60_000, 1_000, 86_400_000),
      };

  const logLevel = env.LOG_LEVEL?.trim() || 'info';
  if (!logLevels.includes(logLevel)) throw new ConfigError(`LOG_LEVEL must be one of ${logLevels.join(', ')}`);

  const token = env.SPEND_MANAGEMENT_TOKEN?.trim();
  return {
    port: integer(env, 'PORT', 8080, 0, 65_535),
    metricsPort: integer(env, 'METRICS_PORT', 9464, 0, 65_535),
    host: env.HOST?.trim() || '0.0.0.0',
    databaseUrl: url(env, 'DATABASE_URL', ['postgres:', 'postgresql:']),
    databaseConnections: databaseConnections(env),
    databaseStatementTimeoutMs: integer(env, 'DATABASE_STATEMENT_TIMEOUT_MS', 5_000, 100, 600_000),
    databaseIdleTimeoutMs: integer(env, 'DATABASE_IDLE_TIMEOUT_MS', 60_000, 100, 3_600_000),
    databasePooler: oneOf(env, 'DATABASE_POOLER', ['none', 'transaction'] as const, 'none'),
    redisUrl: redisUrl(env, flag(env, 'REDIS_CLUSTER', false)),
    redisCluster: flag(env, 'REDIS_CLUSTER', false),
    redisKeyPrefix: env.REDIS_KEY_PREFIX ?? '',
    redisCommandTimeoutMs: integer(env, 'REDIS_COMMAND_TIMEOUT_MS', 1_000, 10, 60_000),
    redisWaitReplicas: integerOr(env, 'REDIS_WAIT_REPLICAS', 'connected', 0, 5),
    redisWaitTimeoutMs: integer(env, 'REDIS_WAIT_TIMEOUT_MS', 100, 1, 10_000),
    redisReplicationCheckIntervalMs: integer(env, 'REDIS_REPLICATION_CHECK_INTERVAL_MS', 1_000, 100, 60_000),
    redisFailoverReassertWindowMs: integer(env, 'REDIS_FAILOVER_REASSERT_WINDOW_MS', 3_600_000, 0, 7 * 24 * 3_600_000),
    spendManagementUrl: url(env, 'SPEND_MANAGEMENT_URL', ['http:', 'https:']),
    spendManagementToken: token ? token : undefined,
    spendManagementTimeoutMs: integer(env, 'SPEND_MANAGEMENT_TIMEOUT_MS', 2_000, 10, 60_000),
    // A sequential caller (one partner retrying) must be able to open a breaker: the window holds
    // three failed calls of a full time-out each, with room to spare.
    breaker: {
      consecutiveFailures: integer(env, 'BREAKER_CONSECUTIVE_FAILURES', 5, 1, 1_000),
      errorThresholdPercentage: integer(env, 'BREAKER_ERROR_THRESHOLD_PERCENT', 50, 1, 100),
      volumeThreshold: integer(env, 'BREAKER_VOLUME_THRESHOLD', 3, 1, 10_000),
      resetTimeoutMs: integer(env, 'BREAKER_RESET_TIMEOUT_MS', 10_000, 100, 600_000),
      rollingWindowMs: integer(env, 'BREAKER_ROLLING_WINDOW_MS', 30_000, 1_000, 600_000),
    },
    partnerKeys,
    logLevel,
    drainDelayMs: integer(env, 'DRAIN_DELAY_MS', 5_000, 0, 120_000),
    shutdownTimeoutMs: integer(env, 'SHUTDOWN_TIMEOUT_MS', 20_000, 1_000, 600_000),
    limits: {
      rateLimitMax: integer(env, 'RATE_LIMIT_MAX', 1_200, 0, 10_000_000),
      rateLimitWindowMs: integer(env, 'RATE_LIMIT_WINDOW_MS', 60_000, 1_000, 86_400_000),
      disablesInFlightPerNetwork: integer(env, 'DISABLES_IN_FLIGHT_PER_NETWORK', 8, 1, 10_000),
      requestDeadlineMs: integer(env, 'REQUEST_DEADLINE_MS', 25_000, 1_000, 600_000),
      overloadMaxEventLoopDelayMs: integer(env, 'OVERLOAD_MAX_EVENT_LOOP_DELAY_MS', 200, 10, 60_000),
      overloadUnauthenticatedUtilizationPercent: integer(env, 'OVERLOAD_UNAUTHENTICATED_UTILIZATION_PERCENT', 50, 1, 100),
      idempotencyKeysPerNetwork: integer(env, 'IDEMPOTENCY_KEYS_PER_NETWORK', 50_000, 1, 10_000_000),
    },
    bulk: {
      statementsInFlight: integer(env, 'BULK_STATEMENTS_IN_FLIGHT', 4, 1, 64),
      callLingerMs: integer(env, 'BULK_CALL_LINGER_MS', 500, 0, 5_000),
    },
    pipeline: {
      // A disable alone in the replica may use every spend-management slot (the scheduler shares
      // them fairly as soon as others wait).
      batchesInFlight: integer(env, 'DISABLE_BATCHES_IN_FLIGHT', 16, 1, 64),
      spendManagementMaxConcurrency: integer(env, 'SPEND_MANAGEMENT_MAX_CONCURRENCY', 16, 1, 1_000),
      workerCallMaxWaitMs: integer(env, 'SPEND_MANAGEMENT_WORKER_MAX_WAIT_MS', 1_000, 10, 60_000),
    },
    worker: {
      pollIntervalMs: integer(env, 'WORKER_POLL_INTERVAL_MS', 2_000, 50, 60_000),
      leaseMs: integer(env, 'WORKER_LEASE_MS', 15_000, 1_000, 60_000),
      backoffBaseMs: integer(env, 'WORKER_BACKOFF_BASE_MS', 1_000, 10, 60_000),
      backoffMaxMs: integer(env, 'WORKER_BACKOFF_MAX_MS', 20_000, 10, 60_000),
      concurrency: integer(env, 'WORKER_CONCURRENCY', 4, 1, 100),
      claimCheckMaxAgeMs: integer(env, 'CLAIM_CHECK_MAX_AGE_MS', 1_000, 10, 10_000),
    },
    webhooks: webhookSettings(env),
    secretsManager: {
      connectTimeoutMs: integer(env, 'SECRETS_MANAGER_CONNECT_TIMEOUT_MS', 2_000, 100, 60_000),
      requestTimeoutMs: integer(env, 'SECRETS_MANAGER_REQUEST_TIMEOUT_MS', 5_000, 100, 60_000),
      maxAttempts: integer(env, 'SECRETS_MANAGER_MAX_ATTEMPTS', 3, 1, 10),
    },
    apiVersionDeprecations: apiVersionDeprecations(env),
    ...eventsAndFeed(env),
  };
}

/**
 * The events settings and the feed's: the batches the relay prunes (EVENTS_RETENTION_MS) are kept at
 * least as long as the feed serves them (EVENTS_FEED_RETENTION_DAYS), so the feed's retention
 * governs the pruning whenever it is the longer (docs/interfaces.md §17).
 */
function eventsAndFeed(env: Env): { events: EventsSettings; feed: FeedSettings } {
  const events = eventsSettings(env);
  const feed: FeedSettings = {
    retentionMs: integer(env, 'EVENTS_FEED_RETENTION_DAYS', 30, 1, 366) * 86_400_000,
    maxStreamsPerNetwork: integer(env, 'EVENTS_FEED_MAX_STREAMS', 5, 1, 1_000),
    heartbeatMs: integer(env, 'EVENTS_FEED_HEARTBEAT_MS', 10_000, 100, 15_000),
    pollIntervalMs: integer(env, 'EVENTS_FEED_POLL_INTERVAL_MS', 100, 10, 5_000),
  };
  return { events: { ...events, retentionMs: Math.max(events.retentionMs, feed.retentionMs) }, feed };
}

/** `address/prefix`, checked; throws with a message naming the value. */
export function parseCidr(cidr: string): [string, number] {
  const match = /^([^/]+)\/(\d{1,3})$/.exec(cidr.trim());
  const family = match ? isIP(match[1]!) : 0;
  const prefix = match ? Number(match[2]) : -1;
  if (!match || family === 0 || prefix > (family === 4 ? 32 : 128))
    throw new Error(`"${cidr}" is not an address range such as 127.0.0.0/8`);
  return [match[1]!, prefix];
}
