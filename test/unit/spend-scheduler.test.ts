import { describe, expect, it } from 'vitest';
import { type CallOwner, SpendScheduler } from '../../src/agents/spend-scheduler.js';

/** Tasks that end when the test says so; `started` records the order in which they got a slot. */
function harness(capacity: number, maxQueued = 1_000, clock?: { now: number; maxWaitMs: number }) {
  const scheduler = new SpendScheduler(capacity, maxQueued, clock?.maxWaitMs, clock && (() => clock.now));
  const started: string[] = [];
  const running: Array<() => void> = [];
  const submit = (owner: CallOwner, label: string) =>
    scheduler.run(owner, () => {
      started.push(label);
      return new Promise<string>((resolve) => running.push(() => resolve(label)));
    });
  /** Ends the oldest running task and lets the scheduler hand its slot on. */
  const finishOne = async () => {
    running.shift()?.();
    await new Promise((resolve) => setImmediate(resolve));
  };
  return { scheduler, started, submit, finishOne };
}

const request = (networkId: string, agentId = `${networkId}-agent`): CallOwner => ({ networkId, agentId, background: false });
const worker = (agentId: string): CallOwner => ({ networkId: 'any', agentId, background: true });

describe('the spend-management scheduler', () => {
  it('gives a disable alone every slot', () => {
    const { started, submit } = harness(4);
    for (let i = 0; i < 10; i += 1) void submit(request('a'), `a${i}`);
    expect(started).toEqual(['a0', 'a1', 'a2', 'a3']);
  });

  it("shares freed slots round robin between networks: a network arriving behind another's backlog waits for at most one slot per other network", async () => {
    const { started, submit, finishOne } = harness(4);
    for (let i = 0; i < 40; i += 1) void submit(request('a'), `a${i}`);
    for (let i = 0; i < 4; i += 1) void submit(request('b'), `b${i}`);
    for (let i = 0; i < 8; i += 1) await finishOne();
    // The 8 slots freed went a, b, a, b, …: B's four calls all started, none waited behind A's 36.
    expect(started.slice(4)).toEqual(['a4', 'b0', 'a5', 'b1', 'a6', 'b2', 'a7', 'b3']);
  });

  it('within a network, shares round robin between agents', async () => {
    const { started, submit, finishOne } = harness(1);
    void submit(request('a', 'big'), 'busy');
    for (let i = 0; i < 5; i += 1) void submit(request('a', 'big'), `big${i}`);
    void submit(request('a', 'small'), 'small0');
    await finishOne();
    await finishOne();
    expect(started).toEqual(['busy', 'big0', 'small0']);
  });

  it("serves the worker's calls only when no request's call waits", async () => {
    const { started, submit, finishOne } = harness(1);
    void submit(request('a'), 'a0');
    void submit(worker('w'), 'w0');
    void submit(request('b'), 'b0');
    void submit(request('a'), 'a1');
    for (let i = 0; i < 3; i += 1) await finishOne();
    expect(started).toEqual(['a0', 'b0', 'a1', 'w0']);
  });

  it("puts a worker's call that waited its maximum before requests' calls that never stop coming", async () => {
    // A clock of the test's own: the scheduler reads the time only through it.
    const clock = { now: 0, maxWaitMs: 1_000 };
    const { started, submit, finishOne } = harness(1, 1_000, clock);
    void submit(request('a'), 'a0');
    void submit(worker('w'), 'w0');
    void submit(worker('w'), 'w1');
    for (let i = 1; i <= 6; i += 1) void submit(request('a'), `a${i}`);
    clock.now = 400;
    await finishOne();
    expect(started).toEqual(['a0', 'a1']);
    clock.now = 1_000; // w0 and w1 have waited 1 s: they go next, one slot each, before a2
    await finishOne();
    await finishOne();
    await finishOne();
    expect(started).toEqual(['a0', 'a1', 'w0', 'w1', 'a2']);
  });

  it("refuses, as spend_management:busy, a call past its network's bound, and only that network's", async () => {
    const { submit } = harness(1, 2);
    void submit(request('a'), 'a0');
    void submit(request('a'), 'a1');
    void submit(request('a'), 'a2');
    await expect(submit(request('a'), 'a3')).rejects.toMatchObject({ dependency: 'spend_management', reason: 'busy' });
    expect(submit(request('b'), 'b0')).toBeInstanceOf(Promise);
  });
});

describe('a slot asked for by the run', () => {
  it('is held until released, and released once however often it is released', async () => {
    const scheduler = new SpendScheduler(1, 10);
    const first = await scheduler.acquire(request('a'));
    let second: { release(): void } | undefined;
    void scheduler.acquire(request('b')).then((slot) => {
      second = slot;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect([scheduler.inFlight, second]).toEqual([1, undefined]);
    first.release();
    first.release();
    await new Promise((resolve) => setImmediate(resolve));
    expect(second).toBeDefined();
    expect(scheduler.inFlight).toBe(1);
    second!.release();
    expect(scheduler.inFlight).toBe(0);
  });
});
