import type { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { DatabasePool } from 'slonik';
import type { Config } from '../config.js';
import type { Metrics } from '../observability/metrics.js';
import type { ServerFailover } from '../stores/database-failover.js';
import { createEventFeedStore } from '../stores/event-feed.js';
import { createStreamSlots } from '../stores/feed-stream-slots.js';
import { createBatchWake } from './batch-wake.js';
import { EventFeed } from './event-feed.js';

/**
 * The partner events feed of a replica (docs/interfaces.md §17): its reads on the request pool, its
 * wake (LISTEN, or a poll behind a transaction pooler), the network's stream slots in the rate
 * limit's Redis (a count of this replica's own when the rate limit is off). Stopped by the
 * service's close before the server closes, which ends its streams.
 */
export function createPartnerEventFeed(
  config: Config,
  parts: {
    pool: DatabasePool;
    redis: Redis | Cluster | undefined;
    metrics: Metrics;
    logger: Logger;
    /** Whether the wake keeps a LISTEN session (counted in the request share), else it polls. */
    listen: boolean;
    /** The pools' failover watch: the LISTEN session leaves a retired server with them. */
    failover?: Pick<ServerFailover, 'onRetire'>;
  },
) {
  const { pool, redis, metrics, logger } = parts;
  const store = createEventFeedStore(pool, metrics);
  const wake = createBatchWake({
    databaseUrl: config.databaseUrl,
    listen: parts.listen,
    pollIntervalMs: config.feed.pollIntervalMs,
    latest: () => store.latest(),
    metrics,
    log: logger,
  });
  parts.failover?.onRetire(() => wake.reconnect());
  // A slot outlives a replica that died by three heartbeats at most.
  const slots = createStreamSlots(redis, config.redisKeyPrefix, Math.max(3 * config.feed.heartbeatMs, 5_000));
  const feed = new EventFeed({ store, wake, slots, settings: config.feed, source: config.events.source, metrics, log: logger });
  const routes = {
    feed,
    retentionDays: Math.round(config.feed.retentionMs / 86_400_000),
    maxStreamsPerNetwork: config.feed.maxStreamsPerNetwork,
  };
  return { feed, routes };
}
