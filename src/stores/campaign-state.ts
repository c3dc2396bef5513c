import { Redis, ReplyError } from 'ioredis';
import type { Metrics } from '../observability/metrics.js';
import { DependencyError, timedCall } from './dependency-error.js';

/** The key-value store's view of campaigns (CONTRACT.md section 5: hash `campaign:<id>`). */
export interface CampaignStateStore {
  /**
   * Sets `paused` = `1` on every campaign's hash (creating it when absent), in one round trip.
   * Resolves with the campaigns Redis confirmed; a key Redis refused (an error reply such as
   * WRONGTYPE) is left out, and only a failure of Redis itself (connection, time-out) rejects.
   */
  markPaused(campaignIds: readonly string[]): Promise<{ confirmed: string[] }>;
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
    markPaused: (campaignIds) =>
      timedCall(
        options.metrics,
        'redis',
        'mark_campaigns_paused',
        async () => {
          await connected();
          const pipeline = client.pipeline();
          for (const id of campaignIds) pipeline.hset(campaignKey(id), 'paused', '1');
          const results = (await pipeline.exec()) ?? [];
          if (results.length !== campaignIds.length) throw new DependencyError('redis', 'bad_response', 'incomplete pipeline');
          const confirmed: string[] = [];
          results.forEach(([error], index) => {
            // A reply error is Redis's answer about that one key; any other error (time-out,
            // connection lost) means Redis itself did not answer.
            if (!error) confirmed.push(campaignIds[index]!);
            else if (!(error instanceof ReplyError)) throw error;
          });
          return { confirmed };
        },
        (error) => {
          const message = (error as Error).message ?? '';
          return new DependencyError('redis', /timed? ?out/i.test(message) ? 'timeout' : 'unavailable', message.slice(0, 120));
        },
      ),
    async close() {
      await client.quit().catch(() => client.disconnect());
    },
  };
}
