import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createStreamSlots } from '../../src/stores/feed-stream-slots.js';

// The fallback of the feed's stream slots when Redis cannot be asked (src/stores/feed-stream-slots.ts);
// the slots across replicas on a real Redis: test/integration/event-feed.process.test.ts.
describe('the feed stream slots without an answer from Redis', () => {
  it('count every stream this replica holds, those taken through Redis too', async () => {
    let down = false;
    const redis = {
      eval: async () => {
        if (down) throw new Error('Command timed out');
        return 1;
      },
      zrem: async () => 1,
    } as unknown as Redis;
    const slots = createStreamSlots(redis, 'test:', 3_000);
    const held = [];
    for (let i = 0; i < 5; i += 1) held.push(await slots.take('network-a', 5));
    expect(held.every(Boolean)).toBe(true);
    down = true;
    expect(await slots.take('network-a', 5)).toBeUndefined();
    expect(await slots.take('network-b', 5)).toBeDefined();
    await held[0]!.release();
    await held[0]!.release(); // twice frees one slot
    const local = await slots.take('network-a', 5);
    expect(local).toBeDefined();
    expect(await slots.take('network-a', 5)).toBeUndefined();
    await local!.release();
    expect(await slots.take('network-a', 5)).toBeDefined();
  });
});
