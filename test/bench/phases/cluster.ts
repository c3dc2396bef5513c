// The service against a Redis Cluster (`--only=cluster`, docs/interfaces.md §13): a cluster of three
// primaries made of redis-server processes for the phase, a service process with REDIS_CLUSTER=true,
// and the same enable load and 10,000-campaign disable (spend management at 25 ms a call) as with
// one Redis server, so that the two stand side by side in one run.
import { Cluster } from 'ioredis';
import { startRedisCluster } from '../../support/redis-cluster.js';
import type { BenchContext } from '../context.js';
import { startService, stop } from '../context.js';
import { disableAcrossNetwork } from './disable-latency.js';
import { checkRateLimitIsOn, measureEnable } from './enable.js';

export async function clusterPhase(ctx: BenchContext): Promise<void> {
  const cluster = await startRedisCluster({ primaries: 3, replicas: 0 });
  const reader = new Cluster(
    cluster.ports.map((port) => ({ host: '127.0.0.1', port })),
    { scaleReads: 'master' },
  );
  reader.on('error', () => undefined);
  try {
    const started = await startService(ctx, 'service-cluster', { REDIS_URL: cluster.url, REDIS_CLUSTER: 'true' });
    const service = { ...started, redisReader: reader, topology: 'Redis Cluster' };
    try {
      await checkRateLimitIsOn(ctx, service.statusUrl);
      await measureEnable(ctx, 'enable, Redis Cluster', service.statusUrl);
      await disableAcrossNetwork(ctx, service);
    } finally {
      await stop(ctx, started);
    }
  } finally {
    reader.disconnect();
    await cluster.close();
  }
}
