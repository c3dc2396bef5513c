// The service against a Redis Cluster (`--only=cluster`, docs/interfaces.md §13): a cluster of three
// primaries made of redis-server processes for the phase, a service process with REDIS_CLUSTER=true,
// and the same enable load and 10,000-campaign disable (spend management at 25 ms a call) as with
// one Redis server, so that the two stand side by side in one run.
import { Cluster } from 'ioredis';
import { startRedisCluster } from '../../support/redis-cluster.js';
import type { BenchContext, Service } from '../context.js';
import { startService, stop } from '../context.js';
import { disableAcrossNetwork } from './disable-latency.js';
import { checkRateLimitIsOn, measureEnable } from './enable.js';

/**
 * The enable load and the big disable against one more service process started with `env`: the
 * figures of one store topology, beside those of the run's main service.
 */
export async function topologyFigures(
  ctx: BenchContext,
  topology: { name: string; service: string; env: Record<string, string>; enableFigure: string; redisReader?: Service['redisReader'] },
): Promise<void> {
  const started = await startService(ctx, topology.service, topology.env);
  const service = { ...started, redisReader: topology.redisReader, topology: topology.name };
  try {
    await checkRateLimitIsOn(ctx, service.statusUrl);
    await measureEnable(ctx, topology.enableFigure, service.statusUrl);
    await disableAcrossNetwork(ctx, service);
  } finally {
    await stop(ctx, started);
  }
}

export async function clusterPhase(ctx: BenchContext): Promise<void> {
  const cluster = await startRedisCluster({ primaries: 3, replicas: 0 });
  const reader = new Cluster(
    cluster.ports.map((port) => ({ host: '127.0.0.1', port })),
    { scaleReads: 'master' },
  );
  reader.on('error', () => undefined);
  try {
    await topologyFigures(ctx, {
      name: 'Redis Cluster',
      service: 'service-cluster',
      env: { REDIS_URL: cluster.url, REDIS_CLUSTER: 'true' },
      enableFigure: 'enable, Redis Cluster',
      redisReader: reader,
    });
  } finally {
    reader.disconnect();
    await cluster.close();
  }
}
