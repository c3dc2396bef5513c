import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { DatabasePool } from 'slonik';
import { createDisableProtocol, protocolSettings } from './agents/disable-protocol.js';
import { createKeySource } from './auth/configured-key-source.js';
import { PartnerKeyStore } from './auth/partner-keys.js';
import { type Config, statementClientMarginMs } from './config.js';
import { allowedRanges, type Lookup, refusalOfUrl } from './events/address-guard.js';
import { EventRelay } from './events/event-relay.js';
import { createNatsPublisher } from './events/nats-publisher.js';
import { createPartnerEventFeed } from './events/partner-event-feed.js';
import { dnsQuery, NetworkLookups, queryOfLookup } from './events/webhook-resolver.js';
import { createWebhookSender } from './events/webhook-sender.js';
import { buildApp } from './http/app.js';
import { createReadiness } from './http/readiness.js';
import { createMetrics, type Metrics } from './observability/metrics.js';
import { createMetricsServer } from './observability/metrics-server.js';
import { Resources } from './resources.js';
import { createAgentBatchStatements } from './stores/agent-batches.js';
import { createAgentRepository } from './stores/agent-repository.js';
import { type CampaignStateStore, createRedisCampaignState } from './stores/campaign-state.js';
import { ServerFailover } from './stores/database-failover.js';
import { createDisableQueue } from './stores/disable-queue.js';
import { createEventBatchStore, type EventBatchStore } from './stores/event-batches.js';
import { createEventOutbox } from './stores/event-outbox.js';
import { createIdempotencyKeys } from './stores/idempotency-keys.js';
import { createDatabasePool } from './stores/postgres.js';
import { createRedisClient, type RedisClient } from './stores/redis-clients.js';
import { startFailoverReassert } from './stores/redis-failover.js';
import { createSecretBox, developmentSecretsKey } from './stores/secret-box.js';
import { createSentPauses } from './stores/sent-pauses.js';
import { createSpendManagementClient } from './stores/spend-management.js';
import { boundedBy, serverBounds, statementsFor } from './stores/statements.js';
import { createStatusBatches } from './stores/status-batches.js';
import { createWebhookDeliveryStore, type DeliveryBound } from './stores/webhook-deliveries.js';
import { createWebhookEndpointStore } from './stores/webhook-endpoints.js';
import { startLoops } from './workers/loops.js';

export interface ServiceOptions {
  logger: Logger;
  /** Replaces the Redis-backed store (npm run dev uses an in-process one). */
  campaignState?: CampaignStateStore;
  /** This replica's name in pending_disables.lease_owner (default: host name and pid). */
  replicaId?: string;
  /** DNS resolution of webhook hosts (tests put a stub here; default: the system resolver). */
  webhookResolve?: Lookup;
}

/**
 * Wires the service from its configuration: the one place where stores, breakers, the key source,
 * the worker and the app meet. main.ts, npm run dev and the integration tests all start the service
 * through here, so tests exercise the production wiring.
 */
export async function createService(config: Config, options: ServiceOptions) {
  const { logger } = options;
  const resources = new Resources();
  try {
    return await assemble(config, options, resources);
  } catch (error) {
    await resources.releaseAll(warnOf(logger));
    throw error;
  }
}

async function assemble(config: Config, options: ServiceOptions, resources: Resources) {
  const { logger } = options;
  const owner = options.replicaId ?? `${hostname()}:${process.pid}`;
  const metrics = createMetrics();
  const keyStore = new PartnerKeyStore();
  const keySource = resources.own('partner keys', createKeySource(config, keyStore, metrics, logger), (source) => source.stop());
  await keySource.start();

  // One failover watch for the four pools: a server found gone or read-only by any of them is left
  // by all (docs/interfaces.md §13).
  const failover = watchFailover(metrics, logger);
  const { requestPool, workerPool, probePool, checkPool } = await openPools(config, failover, resources);
  // Named prepared statements, or unnamed ones behind a pooler (docs/interfaces.md §13).
  const statement = statementsFor(config.databasePooler);
  if (config.databasePooler !== 'none') await checkServerBounds(requestPool, config, logger);
  const eventSource = config.events.source;
  const agents = createAgentRepository(requestPool, metrics, statement, eventSource);
  const agentBatches = createAgentBatchStatements(requestPool, metrics, statement, eventSource);
  const queue = createDisableQueue(requestPool, metrics, checkPool, statement, eventSource);
  const sentPauses = createSentPauses(requestPool, metrics);
  const workerStores = {
    agents: createAgentRepository(workerPool, metrics, statement, eventSource),
    // The worker checks its claims on its own pool: it takes only what requests leave free.
    queue: createDisableQueue(workerPool, metrics, workerPool, statement, eventSource),
    sentPauses: createSentPauses(workerPool, metrics),
  };
  const idempotencyKeys = createIdempotencyKeys(requestPool, metrics, config.limits.idempotencyKeysPerNetwork, statement);

  const campaignState = ownCampaignState(config, options, metrics, resources);
  // After a Redis failover, what the database records as paused recently is paused in Redis again.
  resources.own(
    'redis failover re-assertion',
    startFailoverReassert({
      pool: workerPool,
      campaignState,
      windowMs: config.redisFailoverReassertWindowMs,
      retryMs: config.redisReplicationCheckIntervalMs,
      metrics,
      log: logger,
    }),
    (reassert) => reassert.stop(),
  );
  // The rate limit's own client (none when the limit is off): it must fail fast (fail open) and
  // never queue while disconnected.
  const rateLimitRedis = config.limits.rateLimitMax > 0 ? await connectRateLimitRedis(config, resources) : undefined;

  const spend = resources.own(
    'spend-management client',
    createSpendManagementClient({
      baseUrl: config.spendManagementUrl,
      token: config.spendManagementToken,
      timeoutMs: config.spendManagementTimeoutMs,
      metrics,
      log: logger,
    }),
    (client) => client.close(),
  );
  const expiredBatches = createStatusBatches(workerPool, metrics);
  const expiredKeys = createIdempotencyKeys(workerPool, metrics, config.limits.idempotencyKeysPerNetwork, statement);
  const { runner, useCase, bulk, worker, breakers } = createDisableProtocol({
    settings: protocolSettings(config),
    owner,
    stores: { agents, queue, sentPauses },
    agentBatches,
    workerStores,
    spendManagement: spend,
    campaignState,
    // The housekeeping deletes expired idempotency keys and expired bulk changes (kept 24 hours each).
    expiredKeys: { purgeExpired: async (limit) => (await expiredKeys.purgeExpired(limit)) + (await expiredBatches.purgeExpired(limit)) },
    metrics,
    log: logger,
  });
  resources.own('spend-management breaker', breakers.spendManagement, (breaker) => breaker.shutdown());
  resources.own('redis breaker', breakers.redis, (breaker) => breaker.shutdown());
  // Released after the runs are over: claims still held go back to the queue at once.
  resources.own('claims', owner, (name) =>
    workerStores.queue.releaseOwned(name).then((released) => {
      if (released.disables > 0) logger.info({ count: released.disables }, 'released pending disables for another replica');
      if (released.campaigns > 0) logger.info({ count: released.campaigns }, 'released unsettled campaigns for another replica');
    }),
  );

  const webhooks = createWebhooks(config, options, { requestPool, workerPool }, { owner, metrics, logger });

  const eventFeed = createPartnerEventFeed(config, {
    pool: requestPool,
    redis: rateLimitRedis,
    metrics,
    logger,
    listen: feedListens(config),
    failover,
  });
  const probe = createAgentRepository(probePool, metrics, statement);
  const readiness = createReadiness({ ping: probe.ping, onReadOnly: () => failover.retire('read_only'), keyStore, metrics });
  const app = await buildApp({
    logger,
    metrics,
    keyStore,
    agentStatus: useCase,
    idempotencyKeys,
    isReady: readiness.isReady,
    limits: config.limits,
    rateLimitStore: { redis: rateLimitRedis, keyPrefix: config.redisKeyPrefix },
    apiVersionDeprecations: config.apiVersionDeprecations,
    webhooks: webhooks.routes,
    bulk: { changes: bulk, batches: createStatusBatches(requestPool, metrics) },
    eventFeed: eventFeed.routes,
  });
  const metricsServer = resources.own('metrics server', createMetricsServer(metrics), (server) => server.close());
  // The worker's loops stop with the resources, before the pools they use close.
  startLoops(resources, worker.loops);
  // The sender's loops likewise; once they have stopped, the sender cuts what is still under way,
  // gives back its leases and closes its connections (close() does this earlier, by its deadline).
  resources.own('webhook sender', webhooks.sender, (sender) => sender.stop());
  startLoops(resources, webhooks.sender.loops);
  eventFeed.feed.start();
  // Each batch the relay takes makes its webhook deliveries: the sender looks at once.
  const relay = startEventsRelay(config, workerPool, {
    owner,
    metrics,
    logger,
    resources,
    onBatch: webhooks.sender.nudge,
    deliveryBound: webhooks.deliveryBound,
  });

  // The service's one seam, for main.ts, npm run dev and the tests: the servers to listen on, and
  // what an operator's view or a test needs to look at or nudge (metrics, the key store and
  // source, the worker and the runner, the breakers). Nothing else of the wiring leaks out.
  return {
    /** The partner API and probes (listen on PORT). */
    app,
    /** Prometheus /metrics (listen on METRICS_PORT). */
    metricsServer,
    metrics,
    keyStore,
    keySource,
    /** The convergence worker: pollNow() runs one poll at once. */
    worker,
    /** The webhook sender: nudge() looks for due deliveries at once. */
    webhookSender: webhooks.sender,
    /** The webhook deliveries: enqueue() makes deliveries of events (the outbox relay; tests). */
    webhookDeliveries: webhooks.deliveries,
    /** The webhook endpoints' upkeep: sealStoredSecrets() seals secrets stored in clear (done at start; tests). */
    webhookEndpoints: { sealStoredSecrets: webhooks.sealStoredSecrets },
    /** The disable runs of this replica: joinable(networkId, agentId), idle(). */
    runner,
    /** The events relay: relayNow() relays what is due at once. */
    relay,
    breakers,
    /** Readiness turns 503 so endpoints stop routing here; requests are still served. */
    startDraining: readiness.startDraining,
    get draining() {
      return readiness.draining;
    },
    /**
     * Stops new work and finishes what is running within `timeoutMs`: the worker claims nothing
     * more; disables stop between batches once they could not finish another one in time (they stay
     * pending, released for another replica); the server finishes its requests; then every pool and
     * client is closed, in reverse order, once nothing uses it any more.
     */
    close: closer({ config, runner, worker, webhookSender: webhooks.sender, eventFeed: eventFeed.feed, app, resources, logger }),
  };
}

export type Service = Awaited<ReturnType<typeof createService>>;

/**
 * The events relay (docs/interfaces.md §14, docs/events-order.md), in every replica, with or without a
 * broker (one holder a role per deployment, by lease); on the worker's pool, one statement at a time.
 * Stopped before the pools close.
 */
function startEventsRelay(
  config: Config,
  workerPool: DatabasePool,
  parts: { owner: string; metrics: Metrics; logger: Logger; resources: Resources; onBatch: () => void; deliveryBound: DeliveryBound },
) {
  const { owner, metrics, logger, resources, onBatch, deliveryBound } = parts;
  const { natsUrl, ...events } = config.events;
  const publisher = natsUrl
    ? resources.own('events publisher', createNatsPublisher({ url: natsUrl, ...events }, logger), (nats) => nats.close())
    : undefined;
  const relay = resources.own(
    'events relay',
    new EventRelay({
      batches: nudgingOnBatch(createEventBatchStore(workerPool, metrics, deliveryBound), onBatch),
      outbox: createEventOutbox(workerPool, metrics),
      publisher,
      settings: {
        pollIntervalMs: events.relayPollIntervalMs,
        batchSize: events.relayBatchSize,
        leaseMs: events.relayLeaseMs,
        retryDelayMs: events.relayRetryDelayMs,
        retentionMs: events.retentionMs,
        source: events.source,
      },
      metrics,
      log: logger,
      holder: owner,
    }),
    (eventsRelay) => eventsRelay.stop(),
  );
  relay.start();
  return relay;
}

/**
 * Partner webhooks (docs/interfaces.md §14): the endpoint routes' store and URL check, the
 * deliveries and their sender, a worker of its own on the worker's pool.
 */
function createWebhooks(
  config: Config,
  options: ServiceOptions,
  pools: { requestPool: DatabasePool; workerPool: DatabasePool },
  parts: { owner: string; metrics: Metrics; logger: Logger },
) {
  const { owner, metrics, logger } = parts;
  const box = createSecretBox(secretsKeyMaterial(config.webhooks.secretsKey, logger));
  // The per-network bound on deliveries waiting, for the store's enqueue and the relay's batches alike.
  const deliveryBound: DeliveryBound = {
    networkMaxPending: config.webhooks.networkMaxPending,
    onDropped: (networkId, count) =>
      logger.warn(
        { networkId, count, limit: config.webhooks.networkMaxPending },
        'webhook deliveries not made: the network has as many waiting as it may',
      ),
  };
  const deliveries = createWebhookDeliveryStore(pools.workerPool, metrics, { secrets: box, ...deliveryBound });
  const sender = createWebhookSender({
    store: deliveries,
    settings: config.webhooks,
    leaseMs: config.webhooks.timeoutMs + config.databaseStatementTimeoutMs + statementClientMarginMs + 1_000,
    owner,
    metrics,
    log: logger,
    resolve: options.webhookResolve,
  });
  const settings = config.webhooks;
  const stub = options.webhookResolve;
  const newQuery = () => (stub ? queryOfLookup(stub) : dnsQuery({ servers: settings.dnsServers, timeoutMs: settings.dnsTimeoutMs }));
  const lookups = new NetworkLookups(newQuery, settings.dnsLookupsPerNetwork, () => metrics.webhooks.lookupsRefused.inc());
  const addresses = {
    allowHttp: settings.allowHttp,
    allowed: settings.allowedCidrs.length > 0 ? allowedRanges(settings.allowedCidrs) : undefined,
    allowedPorts: settings.allowedPorts,
  };
  const endpoints = createWebhookEndpointStore(pools.requestPool, metrics, box);
  // Secrets written before they were sealed are sealed now; until then they are read as they are.
  const sealStoredSecrets = () => endpoints.sealStoredSecrets(box);
  sealStoredSecrets().then(
    (count) => count > 0 && logger.info({ count }, 'webhook signing secrets stored in clear are sealed'),
    (error: unknown) =>
      logger.warn({ reason: (error as Error).message }, 'webhook signing secrets in clear could not be sealed; they are read as they are'),
  );
  const routes = {
    endpoints,
    refusalOfUrl: (url: string, networkId: string) =>
      refusalOfUrl(url, { ...addresses, resolveHost: (host) => lookups.resolve(host, networkId) }),
  };
  return { deliveries, deliveryBound, sender, routes, sealStoredSecrets };
}

/** What the signing secrets' key is derived from: WEBHOOK_SECRETS_KEY, the file of WEBHOOK_SECRETS_KEY_FILE, or (never in production) the development key. */
function secretsKeyMaterial(source: Config['webhooks']['secretsKey'], logger: Logger): string {
  if (source.kind === 'value') return source.value;
  if (source.kind === 'file') {
    const material = readFileSync(source.path, 'utf8').trim();
    if (material.length < 32) throw new Error(`WEBHOOK_SECRETS_KEY_FILE ${source.path} must hold at least 32 characters`);
    return material;
  }
  logger.warn('webhook signing secrets are sealed with the development key: set WEBHOOK_SECRETS_KEY_FILE outside development');
  return developmentSecretsKey;
}

/** The service's close(timeoutMs), in the order its seam describes; closing twice closes once. */
function closer(parts: {
  config: Config;
  runner: { stopBy(at: number): void; idle(): Promise<void> };
  worker: { stop(): Promise<void> };
  webhookSender: { stop(by: number): Promise<void> };
  eventFeed: { stop(): Promise<void> };
  app: Awaited<ReturnType<typeof buildApp>>;
  resources: Resources;
  logger: Logger;
}) {
  const { config, runner, worker, webhookSender, eventFeed, app, resources, logger } = parts;
  let closing: Promise<void> | undefined;
  return (timeoutMs = config.shutdownTimeoutMs): Promise<void> => {
    closing ??= (async () => {
      const deadline = performance.now() + timeoutMs;
      runner.stopBy(deadline - 1_000);
      // The feed's streams end first: their clients reconnect to another replica, and the server's
      // close does not wait for them.
      await Promise.all([worker.stop(), webhookSender.stop(deadline - 1_500), eventFeed.stop()]);
      const closed = app.close();
      // A socket accepted but never used for a request (a proxy's pre-opened connection) is not
      // closed by Fastify's idle handling on this Node: past the deadline every connection is
      // closed, so a shutdown never waits for one.
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>((resolve) => {
        timer = setTimeout(() => resolve('late'), Math.max(0, deadline - performance.now() - 500));
      });
      if ((await Promise.race([closed, late])) === 'late') {
        logger.warn('connections still open at the shutdown deadline; closing them');
        app.server.closeAllConnections();
        await closed;
      }
      clearTimeout(timer);
      await runner.idle();
      await resources.releaseAll(warnOf(logger));
    })();
    return closing;
  };
}

/**
 * The failover watch the pools share. While the old server is still what DATABASE_URL reaches,
 * every new connection retires again: one log line a second at most, counting those it stands for.
 */
function watchFailover(metrics: Metrics, logger: Logger): ServerFailover {
  const failover = new ServerFailover();
  let lastRetirementLine = Number.NEGATIVE_INFINITY;
  let unlogged = { retirements: 0, connections: 0 };
  failover.onRetire(({ reason, code, retired }) => {
    metrics.postgresFailovers.inc({ reason });
    metrics.postgresConnectionsRetired.inc(retired);
    unlogged = { retirements: unlogged.retirements + 1, connections: unlogged.connections + retired };
    if (performance.now() - lastRetirementLine < 1_000) return;
    lastRetirementLine = performance.now();
    logger.warn(
      { dependency: 'postgres', reason, code, retiredConnections: unlogged.connections, retirements: unlogged.retirements },
      'leaving the database server: connections retired',
    );
    unlogged = { retirements: 0, connections: 0 };
  });
  return failover;
}

/**
 * Whether this replica's events feed keeps a LISTEN session (src/events/batch-wake.ts): not behind a
 * transaction pooler (no session to keep), and only when the request share (3 or more) can give up
 * one of its connections for it, so that every connection the replica opens stays within DATABASE_MAX_CONNECTIONS;
 * otherwise the feed polls for new batches.
 */
function feedListens(config: Config): boolean {
  return config.databasePooler === 'none' && config.databaseConnections.request >= 3;
}

/**
 * Four pools, so that partner traffic can neither starve the worker nor turn readiness red, and
 * claim checks never wait behind batch statements; together at most DATABASE_MAX_CONNECTIONS.
 */
async function openPools(config: Config, failover: ServerFailover, resources: Resources) {
  const poolOptions = {
    url: config.databaseUrl,
    statementTimeoutMs: config.databaseStatementTimeoutMs,
    idleTimeoutMs: config.databaseIdleTimeoutMs,
    failover,
    pooler: config.databasePooler,
  };
  const shares = config.databaseConnections;
  // The events feed's LISTEN session is one of the request share's connections (feedListens).
  const requestSize = shares.request - (feedListens(config) ? 1 : 0);
  const requestPool = resources.own(
    'request pool',
    await createDatabasePool({ ...poolOptions, maxPoolSize: requestSize, name: 'request', maxWaitMs: config.limits.requestDeadlineMs }),
    (pool) => pool.end(),
  );
  const workerPool = resources.own(
    'worker pool',
    await createDatabasePool({ ...poolOptions, maxPoolSize: shares.worker, name: 'worker' }),
    (pool) => pool.end(),
  );
  const probePool = resources.own(
    'readiness pool',
    await createDatabasePool({ ...poolOptions, maxPoolSize: shares.readiness, name: 'readiness' }),
    (pool) => pool.end(),
  );
  // The claim checks that requests' runs make inside spend-management slots: short reads that must
  // not queue behind other runs' batch statements while they hold a slot.
  const checkPool = resources.own(
    'claim-check pool',
    await createDatabasePool({ ...poolOptions, maxPoolSize: shares.claimChecks, name: 'claim-check' }),
    (pool) => pool.end(),
  );
  return { requestPool, workerPool, probePool, checkPool };
}

/**
 * Behind a pooler the service sends no session setting: its statements are bounded on the server
 * only by the role's settings (docs/operations.md, "Behind PgBouncer"). A start without them is
 * said once in the log; the client-side bound still ends a statement that does not answer.
 */
async function checkServerBounds(pool: Parameters<typeof serverBounds>[0], config: Config, logger: Logger): Promise<void> {
  const bounds = await serverBounds(pool);
  if (boundedBy(bounds, config.databaseStatementTimeoutMs)) return;
  logger.warn(
    { ...bounds, databaseStatementTimeoutMs: config.databaseStatementTimeoutMs },
    'behind the pooler, the database role does not bound statements as DATABASE_STATEMENT_TIMEOUT_MS says: set statement_timeout and idle_in_transaction_session_timeout on the role',
  );
}

/** The batches, whose statement makes the webhook deliveries: the sender looks for them at once. */
function nudgingOnBatch(batches: EventBatchStore, nudge: () => void): EventBatchStore {
  return {
    ...batches,
    take: async (...args) => {
      const taken = await batches.take(...args);
      if (taken.fannedOut) nudge();
      return taken;
    },
    fanOut: async (...args) => {
      const fanned = await batches.fanOut(...args);
      if (fanned.events > 0) nudge();
      return fanned;
    },
  };
}

const warnOf = (log: Logger) => (resource: string, reason: string) => log.warn({ resource, reason }, 'resource did not close cleanly');

/** The campaign state store: Redis, or the one npm run dev passes in. */
function ownCampaignState(config: Config, options: ServiceOptions, metrics: Metrics, resources: Resources): CampaignStateStore {
  return resources.own(
    'campaign state',
    options.campaignState ??
      createRedisCampaignState({
        url: config.redisUrl,
        cluster: config.redisCluster,
        keyPrefix: config.redisKeyPrefix,
        commandTimeoutMs: config.redisCommandTimeoutMs,
        waitReplicas: config.redisWaitReplicas,
        waitTimeoutMs: config.redisWaitTimeoutMs,
        replicationCheckIntervalMs: config.redisReplicationCheckIntervalMs,
        metrics,
      }),
    (store) => store.close(),
  );
}

async function connectRateLimitRedis(config: Config, resources: Resources): Promise<RedisClient> {
  const client = resources.own(
    'rate-limit redis',
    createRedisClient(
      { url: config.redisUrl, cluster: config.redisCluster },
      {
        protocol: 2,
        lazyConnect: true,
        enableOfflineQueue: false,
        maxRetriesPerRequest: 0,
        commandTimeout: Math.min(config.redisCommandTimeoutMs, 250),
        connectTimeout: 1_000,
        retryStrategy: (attempt) => Math.min(attempt * 100, 2_000),
      },
    ),
    (redis) => redis.quit().catch(() => redis.disconnect()),
  );
  client.on('error', () => undefined);
  client.connect().catch(() => undefined);
  // Serve the first requests with the limit on: wait (briefly) for the connection. Redis being down
  // does not stop the start; the limit then fails open until it is back.
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, 2_000);
    client.once('ready', () => {
      clearTimeout(timer);
      resolve();
    });
  });
  return client;
}
