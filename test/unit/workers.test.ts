// The background loops of src/workers/ on a clock the test holds: claims, work, backoff, stop,
// housekeeping, and their start and stop through the resources.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { Resources } from '../../src/resources.js';
import { Housekeeping } from '../../src/workers/housekeeping.js';
import { startLoops } from '../../src/workers/loops.js';
import { PollLoop, type PollWork } from '../../src/workers/poll-loop.js';
import { fakeClock } from '../support/clock.js';

const log = createLogger('silent');

/** A queue of numbered items behind a poll loop, with what it claimed, worked and released. */
function queueLoop(options: {
  due: number;
  concurrency: number;
  workMs?: number;
  pollIntervalMs?: number;
  roundsPerPoll?: number;
  claimWhenFreed?: boolean;
  nudgeDelayMs?: number;
}) {
  const clock = fakeClock();
  const metrics = createMetrics({ collectDefaults: false });
  const seen = { claims: [] as number[], worked: [] as number[], released: [] as number[], claimFails: 0 };
  let next = 0;
  const work: PollWork<number> = {
    name: 'unit',
    claim: async (free) => {
      if (seen.claimFails > 0) {
        seen.claimFails -= 1;
        throw new Error('database gone');
      }
      const items = Array.from({ length: Math.min(free, options.due - next) }, () => next++);
      seen.claims.push(items.length);
      return items;
    },
    work: async (item) => {
      await clock.sleep(options.workMs ?? 0);
      if (item === 13) throw new Error('bug');
      seen.worked.push(item);
    },
    release: async (item) => {
      seen.released.push(item);
    },
  };
  const loop = new PollLoop(
    work,
    {
      pollIntervalMs: 'pollIntervalMs' in options ? options.pollIntervalMs : 1_000,
      concurrency: options.concurrency,
      leaseMs: 10_000,
      roundsPerPoll: options.roundsPerPoll,
      claimWhenFreed: options.claimWhenFreed,
      nudgeDelayMs: options.nudgeDelayMs,
    },
    { log, metrics, clock },
  );
  return { loop, seen, metrics, clock };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('the poll loop', () => {
  it('claims up to its free capacity at start and at each poll, and works every item', async () => {
    const { loop, seen, metrics } = queueLoop({ due: 5, concurrency: 2, workMs: 100 });
    loop.start();
    await vi.advanceTimersByTimeAsync(10);
    expect(seen.claims).toEqual([2]);
    // Both items busy for 100 ms: the next poll (0.5 to 1.5 s later) finds capacity again.
    await vi.advanceTimersByTimeAsync(1_600);
    expect(seen.claims.slice(0, 2)).toEqual([2, 2]);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(seen.worked.sort()).toEqual([0, 1, 2, 3, 4]);
    expect(await metrics.registry.getSingleMetricAsString('background_loop_claimed_total')).toContain('loop="unit"} 5');
    await loop.stop();
  });

  it('claims again at once while its claims come back full, a few rounds in a row', async () => {
    const { loop, seen } = queueLoop({ due: 10, concurrency: 1, workMs: 10, pollIntervalMs: 60_000, roundsPerPoll: 3 });
    loop.start();
    await vi.advanceTimersByTimeAsync(100);
    // The first claim and two more rounds at once; the rest waits for the next poll.
    expect(seen.worked).toEqual([0, 1, 2]);
    await loop.stop();
  });

  it('waits longer after each failed claim, counts and logs it, and recovers by itself', async () => {
    const { loop, seen, metrics } = queueLoop({ due: 1, concurrency: 1, pollIntervalMs: 1_000 });
    seen.claimFails = 3;
    loop.start();
    // Failed at start; then backoffs of 2, 4 and 8 s (each ×0.5 to ×1.5): within 1 s only the first.
    await vi.advanceTimersByTimeAsync(900);
    expect(seen.claimFails).toBe(2);
    await vi.advanceTimersByTimeAsync(30_000);
    expect(seen.claimFails).toBe(0);
    expect(seen.worked).toEqual([0]);
    expect(await metrics.registry.getSingleMetricAsString('background_loop_failures_total')).toContain('loop="unit",stage="claim"} 3');
    await loop.stop();
  });

  it('gives back an item whose work crashed, and goes on with the others', async () => {
    const { loop, seen, metrics } = queueLoop({ due: 15, concurrency: 15 });
    loop.start();
    await vi.advanceTimersByTimeAsync(10);
    await loop.drained();
    expect(seen.released).toEqual([13]);
    expect(seen.worked).toHaveLength(14);
    expect(await metrics.registry.getSingleMetricAsString('background_loop_failures_total')).toContain('loop="unit",stage="work"} 1');
    await loop.stop();
  });

  it('claims nothing more once stopped; a loop without an interval polls only when nudged', async () => {
    const { loop, seen } = queueLoop({ due: 100, concurrency: 1, workMs: 10 });
    loop.start();
    await vi.advanceTimersByTimeAsync(20);
    await loop.stop();
    await loop.stop();
    const claimed = seen.claims.length;
    await vi.advanceTimersByTimeAsync(60_000);
    expect(seen.claims).toHaveLength(claimed);

    const nudged = queueLoop({ due: 3, concurrency: 1, pollIntervalMs: undefined });
    nudged.loop.start();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(nudged.seen.claims).toEqual([1]);
    nudged.loop.nudge();
    await vi.advanceTimersByTimeAsync(10);
    expect(nudged.seen.claims).toEqual([1, 1]);
    await nudged.loop.stop();
  });
});

describe('the poll loop as the webhook sender uses it', () => {
  it('claims again whenever an item ends, so a freed slot is filled before the next poll', async () => {
    const { loop, seen } = queueLoop({ due: 5, concurrency: 2, workMs: 10, pollIntervalMs: 60_000, claimWhenFreed: true });
    loop.start();
    await vi.advanceTimersByTimeAsync(100);
    expect(seen.worked.sort()).toEqual([0, 1, 2, 3, 4]);
    // Without it, the same loop waits for its next poll, a minute away.
    const waiting = queueLoop({ due: 5, concurrency: 2, workMs: 10, pollIntervalMs: 60_000 });
    waiting.loop.start();
    await vi.advanceTimersByTimeAsync(100);
    expect(waiting.seen.worked.sort()).toEqual([0, 1]);
    await Promise.all([loop.stop(), waiting.loop.stop()]);
  });

  it('waits nudgeDelayMs after a nudge, so nudges close together make one claim; a stop drops the nudge', async () => {
    const { loop, seen } = queueLoop({ due: 100, concurrency: 10, pollIntervalMs: 60_000, nudgeDelayMs: 5 });
    loop.start();
    await vi.advanceTimersByTimeAsync(1);
    expect(seen.claims).toEqual([10]);
    // A bound method: handed out as a callback, as the relay's batches do.
    const { nudge } = loop;
    nudge();
    nudge();
    await vi.advanceTimersByTimeAsync(3);
    expect(seen.claims).toEqual([10]);
    await vi.advanceTimersByTimeAsync(5);
    expect(seen.claims).toEqual([10, 10]);
    nudge();
    await loop.stop();
    await vi.advanceTimersByTimeAsync(50);
    expect(seen.claims).toEqual([10, 10]);
  });
});

describe('the housekeeping loop', () => {
  it('runs each chore on its own period, one at a time, and a failing chore neither stops nor delays the others', async () => {
    const clock = fakeClock();
    const metrics = createMetrics({ collectDefaults: false });
    const runs: string[] = [];
    const housekeeping = new Housekeeping(
      [
        { name: 'gauges', everyMs: 1_000, run: async () => void runs.push('gauges') },
        {
          name: 'purge',
          everyMs: 60_000,
          run: async () => {
            runs.push('purge');
            throw new Error('database gone');
          },
        },
      ],
      { log, metrics, clock },
    );
    housekeeping.start();
    await vi.advanceTimersByTimeAsync(30_000);
    expect(runs.filter((run) => run === 'purge')).toHaveLength(1);
    // Ticks come every 0.5-1.5 s (jitter) and a chore runs at the first tick 0.9 s after its last
    // run: at most 2.4 s apart, so at least 12 runs in 30 s whatever Math.random draws (20 was a
    // typical count, and a run of long draws gave 19).
    expect(runs.filter((run) => run === 'gauges').length).toBeGreaterThanOrEqual(12);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(runs.filter((run) => run === 'purge')).toHaveLength(2);
    expect(await metrics.registry.getSingleMetricAsString('background_loop_failures_total')).toContain(
      'loop="housekeeping",stage="purge"} 2',
    );
    await housekeeping.stop();
    const count = runs.length;
    await vi.advanceTimersByTimeAsync(60_000);
    expect(runs).toHaveLength(count);
  });
  it('keeps its own name in metrics and looks at its chores every tickMs when given', async () => {
    const clock = fakeClock();
    const metrics = createMetrics({ collectDefaults: false });
    let runs = 0;
    const upkeep = new Housekeeping(
      [
        {
          name: 'prune',
          everyMs: 10_000,
          run: async () => {
            runs += 1;
            throw new Error('database gone');
          },
        },
      ],
      { log, metrics, clock, name: 'webhook_housekeeping', tickMs: 1_000 },
    );
    expect(upkeep.name).toBe('webhook_housekeeping');
    upkeep.start();
    // Due again 9 to 10 s after its first turn, seen within a tick (at most 1.5 s): never at 15 s or later.
    await vi.advanceTimersByTimeAsync(11_600);
    expect(runs).toBe(2);
    expect(await metrics.registry.getSingleMetricAsString('background_loop_failures_total')).toContain(
      'loop="webhook_housekeeping",stage="prune"} 2',
    );
    await upkeep.stop();
  });
});

describe('the loops and the resources', () => {
  it('starts each loop and stops them, newest first, with the resources', async () => {
    const events: string[] = [];
    const loop = (name: string) => ({
      name,
      start: () => void events.push(`start ${name}`),
      stop: async () => void events.push(`stop ${name}`),
    });
    const resources = new Resources();
    resources.own('pool', 'pool', () => void events.push('close pool'));
    startLoops(resources, [loop('housekeeping'), loop('convergence')]);
    expect(events).toEqual(['start housekeeping', 'start convergence']);
    expect(await resources.releaseAll(() => undefined)).toBe(true);
    expect(events.slice(2)).toEqual(['stop convergence', 'stop housekeeping', 'close pool']);
  });
});
