import { randomUUID } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';

/**
 * The events feed's streams a network holds open (docs/interfaces.md §17: at most
 * EVENTS_FEED_MAX_STREAMS across replicas). Each stream holds a slot in Redis, a member of the
 * network's sorted set scored by when its lease runs out, renewed with every heartbeat and removed
 * when the stream ends; a replica that dies leaves its slots to run out. When Redis cannot be asked
 * the count is this replica's own (fails open to a per-replica limit, as the rate limit does).
 */
export interface StreamSlot {
  renew(): Promise<void>;
  release(): Promise<void>;
}

export interface StreamSlots {
  /** A slot of the network's, or undefined when it holds `max` already. */
  take(networkId: string, max: number): Promise<StreamSlot | undefined>;
}

// Redis's own clock, so replicas' clocks do not matter: drop the run-out leases, count, add.
const takeScript = `
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return 1`;
const renewScript = `
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', ms + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
return 1`;

export function createStreamSlots(redis: Redis | Cluster | undefined, keyPrefix: string, leaseMs: number): StreamSlots {
  /**
   * Every slot this replica holds, by network, however it was taken: when Redis cannot be asked, a
   * new stream is counted against all of them (a count of only the slots taken without Redis let a
   * sixth stream in beside five taken through it, seen on a busy machine).
   */
  const held = new Map<string, number>();
  const hold = (networkId: string, release: () => Promise<void>): StreamSlot['release'] => {
    held.set(networkId, (held.get(networkId) ?? 0) + 1);
    let released = false;
    return async () => {
      if (released) return;
      released = true;
      const left = (held.get(networkId) ?? 1) - 1;
      if (left > 0) held.set(networkId, left);
      else held.delete(networkId);
      await release();
    };
  };
  const localSlot = (networkId: string, max: number): StreamSlot | undefined => {
    if ((held.get(networkId) ?? 0) >= max) return undefined;
    return { renew: async () => undefined, release: hold(networkId, async () => undefined) };
  };
  return {
    async take(networkId, max) {
      if (!redis) return localSlot(networkId, max);
      const key = `${keyPrefix}feed-streams:{${networkId}}`;
      const member = randomUUID();
      let taken: unknown;
      try {
        taken = await redis.eval(takeScript, 1, key, max, leaseMs, member);
      } catch {
        return localSlot(networkId, max);
      }
      if (taken !== 1) return undefined;
      return {
        renew: async () => {
          await redis.eval(renewScript, 1, key, leaseMs, member).catch(() => undefined);
        },
        release: hold(networkId, async () => {
          await redis.zrem(key, member).catch(() => undefined);
        }),
      };
    },
  };
}
