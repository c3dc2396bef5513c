// The rate limit of a bulk change: every change counts as one request (docs/interfaces.md §16).
import type { Cluster, Redis } from 'ioredis';
import { redisFailure, timedCall } from '../observability/dependency-calls.js';
import type { Metrics } from '../observability/metrics.js';

/**
 * Takes `extra` more requests from the network's window when they all fit, else none, and then
 * gives back the one the guard counted for the batch's own request too: a batch the remaining
 * allowance cannot hold uses none of it. The same counter as the guard's (@fastify/rate-limit's key,
 * `<prefix>rate-limit:<networkId>`), so batches and single requests share one budget.
 */
const spendScript = `
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local extra = tonumber(ARGV[1])
local max = tonumber(ARGV[2])
if current + extra > max then
  if current > 0 then redis.call('DECR', KEYS[1]) end
  local ttl = redis.call('PTTL', KEYS[1])
  return {0, ttl, current - 1}
end
local now = redis.call('INCRBY', KEYS[1], extra)
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  ttl = tonumber(ARGV[3])
end
return {1, ttl, now}
`;

export type BatchAllowance = (
  networkId: string,
  changes: number,
) => Promise<{ allowed: true } | { allowed: false; retryAfterSeconds: number; remaining: number }>;

/** The batch's spend of the network's rate limit; undefined when the limit is off (RATE_LIMIT_MAX=0 or no Redis). */
export function batchAllowance(settings: {
  redis: Redis | Cluster | undefined;
  keyPrefix: string;
  rateLimitMax: number;
  rateLimitWindowMs: number;
  metrics: Metrics;
}): BatchAllowance | undefined {
  const { redis } = settings;
  if (!redis || settings.rateLimitMax === 0) return undefined;
  return async (networkId, changes) => {
    if (changes <= 1) return { allowed: true };
    try {
      const [allowed, ttl, count] = (await timedCall(
        settings.metrics,
        'redis',
        'rate_limit_batch',
        () =>
          redis.eval(
            spendScript,
            1,
            `${settings.keyPrefix}rate-limit:${networkId}`,
            changes - 1,
            settings.rateLimitMax,
            settings.rateLimitWindowMs,
          ) as Promise<[number, number, number]>,
        redisFailure,
      )) as [number, number, number];
      if (allowed === 1) return { allowed: true };
      return {
        allowed: false,
        retryAfterSeconds: Math.max(1, Math.ceil(ttl / 1000)),
        remaining: Math.max(0, settings.rateLimitMax - count),
      };
    } catch {
      // As the guard: the limit fails open while Redis cannot be asked (counted there too).
      settings.metrics.rateLimitStoreErrors.inc();
      return { allowed: true };
    }
  };
}
