import { performance } from 'node:perf_hooks';
import type { DatabasePool } from 'slonik';
import { describe, expect, it } from 'vitest';
import { forNetwork, gatedPool, PoolWaitExceeded, waitingUntil } from '../../src/stores/pool-wait.js';

/** A stand-in for slonik's pool: `one` runs until the test releases it; what ran is recorded. */
function fakePool() {
  const started: string[] = [];
  const releases: (() => void)[] = [];
  const pool = {
    one: (name: string) =>
      new Promise<string>((resolve) => {
        started.push(name);
        releases.push(() => resolve(name));
      }),
    state: () => 'untouched',
  };
  return { pool: pool as unknown as DatabasePool & { one: (name: string) => Promise<string> }, started, releases };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('a gated pool', () => {
  it('runs statements up to its size at once and hands the next slot to the longest waiting', async () => {
    const { pool, started, releases } = fakePool();
    const gated = gatedPool(pool, 'request', 2, 10_000) as typeof pool;
    const answers = ['a', 'b', 'c', 'd'].map((name) => gated.one(name));
    await settle();
    expect(started).toEqual(['a', 'b']);
    releases[0]!();
    await answers[0];
    await settle();
    expect(started).toEqual(['a', 'b', 'c']);
    for (const release of releases.slice(1)) release();
    await settle();
    releases[3]!();
    expect(await Promise.all(answers)).toEqual(['a', 'b', 'c', 'd']);
    expect(gated.state()).toBe('untouched');
  });

  it('fails a statement that gets no slot within its bound, and never sends it afterwards', async () => {
    const { pool, started, releases } = fakePool();
    const gated = gatedPool(pool, 'worker', 1, 50) as typeof pool;
    const first = gated.one('first');
    const startedAt = performance.now();
    await expect(gated.one('late')).rejects.toBeInstanceOf(PoolWaitExceeded);
    expect(performance.now() - startedAt).toBeGreaterThanOrEqual(45);
    releases[0]!();
    await first;
    await settle();
    expect(started).toEqual(['first']);
    // The slot is free again for the next statement.
    const next = gated.one('next');
    await settle();
    releases[1]!();
    expect(await next).toBe('next');
  });

  it("waits no longer than the caller's nearer bound (waitingUntil), whatever the pool's own", async () => {
    const { pool, releases } = fakePool();
    const gated = gatedPool(pool, 'request', 1, 60_000) as typeof pool;
    const first = gated.one('first');
    const startedAt = performance.now();
    const refusal = await waitingUntil(performance.now() + 50, () => gated.one('bounded')).catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(PoolWaitExceeded);
    expect((refusal as PoolWaitExceeded).summary).toBe('postgres:busy');
    expect(performance.now() - startedAt).toBeLessThan(5_000);
    releases[0]!();
    await first;
  });

  it("hands a freed slot to the network holding the fewest, so another network's statement does not wait behind a queue of a thousand", async () => {
    const { pool, started, releases } = fakePool();
    const gated = gatedPool(pool, 'request', 2, 10_000) as typeof pool;
    const bulk = Array.from({ length: 6 }, (_, n) => forNetwork('A', () => gated.one(`a${n}`)));
    await settle();
    const single = forNetwork('B', () => gated.one('b'));
    const own = gated.one('replica');
    await settle();
    expect(started).toEqual(['a0', 'a1']);
    releases[0]!();
    await settle();
    // B holds none, A one: B's statement goes before A's four that waited longer, then the replica's own.
    expect(started).toEqual(['a0', 'a1', 'b']);
    // Both ended: A and the replica hold none, so the longest waiting of them: A's next, in A's order.
    releases[1]!();
    await settle();
    expect(started).toEqual(['a0', 'a1', 'b', 'a2']);
    // B's ended: A holds one, the replica none.
    releases[2]!();
    await settle();
    expect(started).toEqual(['a0', 'a1', 'b', 'a2', 'replica']);
    releases[3]!();
    await settle();
    expect(started).toEqual(['a0', 'a1', 'b', 'a2', 'replica', 'a3']);
    for (const release of releases.slice(4)) release();
    await settle();
    for (const release of releases.slice(6)) release();
    expect(await Promise.all([...bulk, single, own])).toEqual(['a0', 'a1', 'a2', 'a3', 'a4', 'a5', 'b', 'replica']);
  });
});
