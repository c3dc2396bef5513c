import { Redis } from 'ioredis';
import type { Metrics } from '../observability/metrics.js';
import { DependencyError } from './dependency-error.js';

/** The key-value store's view of campaigns (CONTRACT.md section 5: hash `campaign:<id>`). */
export interface CampaignStateStore {
  /** Sets `paused` = `1` on every campaign's hash (creating it when absent), in one round trip. */
  markPaused(campaignIds: readonly string[]): Promise<void>;
  close(): Promise<void>;
}

export const campaignKey = (campaignId: string) => `campaign:${campaignId}`;

export interface RedisCampaignStateOptions {
  url: string;
  keyPrefix: string;
  commandTimeoutMs: number;
  metrics: Metrics;
}

/**
 * ioredis with settings for a request path: no offline queue and one retry per command, so an
 * outage fails fast (and feeds the breaker) instead of parking requests; the client reconnects by
 * itself in the background. RESP2 is kept explicitly (ioredis 6 defaults to RESP3; nothing here
 * needs it).
 */
export function createRedisCampaignState(options: RedisCampaignStateOptions): CampaignStateStore & { client: Redis } {
  const client = new Redis(options.url, {
    keyPrefix: options.keyPrefix,
    protocol: 2,
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: options.commandTimeoutMs,
    connectTimeout: Math.max(options.commandTimeoutMs, 1_000),
    retryStrategy: (attempt) => Math.min(attempt * 100, 2_000),
  });
  // Connection errors surface through the commands that fail; the 'error' event only needs a listener.
  client.on('error', () => undefined);
  client.connect().catch(() => undefined);

  /** Right after start or a reconnect, waits (within the command timeout) for the connection. */
  async function connected(): Promise<void> {
    if (client.status === 'ready') return;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        client.off('ready', onReady);
        reject(new DependencyError('redis', 'unavailable', `not connected (${client.status})`));
      }, options.commandTimeoutMs);
      const onReady = () => {
        clearTimeout(timer);
        resolve();
      };
      client.once('ready', onReady);
    });
  }

  return {
    client,
    async markPaused(campaignIds) {
      const started = performance.now();
      let outcome: 'ok' | 'error' = 'error';
      try {
        await connected();
        const pipeline = client.pipeline();
        for (const id of campaignIds) pipeline.hset(campaignKey(id), 'paused', '1');
        const results = (await pipeline.exec()) ?? [];
        const failed = results.find(([error]) => error);
        if (failed || results.length !== campaignIds.length) {
          throw new DependencyError('redis', 'bad_response', failed?.[0]?.name ?? 'incomplete pipeline');
        }
        outcome = 'ok';
      } catch (error) {
        if (error instanceof DependencyError) throw error;
        const message = (error as Error).message ?? '';
        throw new DependencyError('redis', /timed? ?out/i.test(message) ? 'timeout' : 'unavailable', message.slice(0, 120));
      } finally {
        options.metrics.dependencyDuration.observe(
          { dependency: 'redis', operation: 'mark_campaigns_paused', outcome },
          (performance.now() - started) / 1000,
        );
      }
    },
    async close() {
      await client.quit().catch(() => client.disconnect());
    },
  };
}
