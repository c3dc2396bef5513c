import { Cluster, Redis, type RedisOptions } from 'ioredis';

/** Where Redis is: one server, or a Redis Cluster reached through seed nodes (docs/interfaces.md §13). */
export interface RedisLocation {
  /** REDIS_URL: one URL, or in cluster mode a comma-separated list of seed nodes. */
  url: string;
  cluster: boolean;
}

/** A client of either kind: both speak the same commands (a Cluster routes each key to its node). */
export type RedisClient = Redis | Cluster;

/**
 * A client for `location`, with `options` as for one server. In cluster mode the seed nodes come
 * from the URLs, the credentials and TLS from the first one (a cluster has one set of each), and:
 * - `keyPrefix` is the cluster's own option (each key is routed with its prefix);
 * - MOVED and ASK redirections are followed, a few times, with a short pause after a failover's
 *   CLUSTERDOWN or a resharding's TRYAGAIN; slots are refreshed by the client as it learns them;
 * - the offline queue stays on inside the client, so a command that meets a redirection or a slot
 *   refresh is sent again instead of failing; callers bound every call with their own time-out;
 * - with `autoPipelining`, the commands one caller issues in the same tick are grouped by the node
 *   that serves their slots, one round trip per node (ioredis' auto-pipelining in cluster mode).
 */
export function createRedisClient(
  location: RedisLocation,
  options: RedisOptions & { autoPipelining?: boolean; clusterOfflineQueue?: boolean },
): RedisClient {
  const { autoPipelining, clusterOfflineQueue, ...redisOptions } = options;
  if (!location.cluster) return new Redis(location.url, redisOptions);
  const urls = location.url.split(',').map((node) => new URL(node.trim()));
  const first = urls[0]!;
  const { keyPrefix, retryStrategy, enableOfflineQueue, lazyConnect, ...nodeOptions } = redisOptions;
  return new Cluster(
    urls.map((node) => ({ host: node.hostname, port: Number(node.port || 6379) })),
    {
      keyPrefix,
      lazyConnect,
      enableOfflineQueue: clusterOfflineQueue ?? enableOfflineQueue,
      enableAutoPipelining: autoPipelining ?? false,
      scaleReads: 'master',
      maxRedirections: 16,
      retryDelayOnFailover: 100,
      retryDelayOnClusterDown: 100,
      retryDelayOnTryAgain: 100,
      retryDelayOnMoved: 0,
      slotsRefreshTimeout: Math.max(1_000, nodeOptions.connectTimeout ?? 1_000),
      slotsRefreshInterval: 1_000,
      clusterRetryStrategy: (attempt) => Math.min(attempt * 100, 2_000),
      redisOptions: {
        ...nodeOptions,
        username: first.username ? decodeURIComponent(first.username) : undefined,
        password: first.password ? decodeURIComponent(first.password) : undefined,
        ...(first.protocol === 'rediss:' ? { tls: {} } : {}),
      },
    },
  );
}
