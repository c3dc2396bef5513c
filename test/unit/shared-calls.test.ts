import { randomUUID } from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import { ClaimCheck } from '../../src/agents/claim-check.js';
import { batchCallsInFlight, type PartOutcome, SharedCalls } from '../../src/agents/shared-calls.js';
import { systemClock } from '../../src/clock.js';
import type { SharedPart } from '../../src/stores/disable-queue.js';
import { patience } from '../support/wait.js';

// The shared calls of one bulk change (src/agents/shared-calls.ts): parts packed into calls of up to
// 100 campaigns, one claim check for the call that drops the parts whose claim is gone before the
// call is recorded, the call sent exactly as recorded, one Redis round trip per call.

interface Harness {
  calls: Array<{ ids: readonly string[]; key: string }>;
  checks: Array<{ parts: readonly SharedPart[]; sentKey: string }>;
  stored: Array<readonly string[]>;
  shared: SharedCalls;
}

function harness(
  superseded: ReadonlySet<string> = new Set(),
  options: { callsInFlight?: number | (() => number); answered?: Promise<void>; answer?: () => Promise<void> } = {},
): Harness {
  const h: Omit<Harness, 'shared'> = { calls: [], checks: [], stored: [] };
  const shared = new SharedCalls(
    {
      inSlot: (_owner, task) => task(),
      pauseSpending: async (ids, key) => {
        h.calls.push({ ids, key });
        await (options.answer?.() ?? options.answered);
        return { confirmed: [...ids] };
      },
      markPausedInStore: async (ids) => {
        h.stored.push(ids);
        return { confirmed: [...ids] };
      },
      checkSharedClaims: async (parts, sentKey) => {
        h.checks.push({ parts, sentKey });
        return new Set(parts.map((part) => part.agentId).filter((agentId) => !superseded.has(agentId)));
      },
      breakerOpen: () => false,
      clock: systemClock,
      claimCheckMaxAgeMs: 60_000,
      lingerMs: 1_000,
      callsInFlight:
        typeof options.callsInFlight === 'function' ? options.callsInFlight : () => (options.callsInFlight as number | undefined) ?? 8,
    },
    { networkId: 'n', agentId: 'batch', background: false },
  );
  return { ...h, shared };
}

/** One agent of the change with `n` campaigns: joins, is recorded, offers its one part. */
function agent(shared: SharedCalls, n: number) {
  const agentId = `us-east-1:${randomUUID()}`;
  const ids = Array.from({ length: n }, () => randomUUID());
  const lease = { claimToken: randomUUID(), owner: 'unit', leaseMs: 15_000 };
  const lost: string[] = [];
  const claims = new ClaimCheck({ checkClaim: async () => true }, agentId, lease, {
    claimLost: () => lost.push(agentId),
    failed: () => undefined,
  });
  const member = shared.join();
  const offer = (): Promise<PartOutcome | undefined> => {
    member.recorded();
    return shared.pause({
      agentId,
      lease,
      batch: { campaignIds: ids, callKey: randomUUID() },
      claims,
      mayJoin: () => true,
      recorded: () => undefined,
    });
  };
  return { agentId, ids, lost, member, offer };
}

describe('shared calls of a bulk change', () => {
  it('drops the part of an agent whose claim is gone before the call is recorded, and sends the rest as recorded', async () => {
    const superseded = new Set<string>();
    const h = harness(superseded);
    const [a, b, c] = [agent(h.shared, 10), agent(h.shared, 10), agent(h.shared, 10)];
    superseded.add(b.agentId); // an enable answered between the read and the call
    const [outA, outB, outC] = await Promise.all([a.offer(), b.offer(), c.offer()]);
    expect(h.checks).toHaveLength(1);
    expect(h.calls).toEqual([{ ids: [...a.ids, ...c.ids], key: h.checks[0]!.sentKey }]);
    expect(outB).toBeUndefined();
    expect(b.lost).toEqual([b.agentId]);
    expect(outA!.confirmed).toEqual(a.ids);
    expect((await outC!.stored).confirmed).toEqual(c.ids);
    expect(h.stored).toEqual([[...a.ids, ...c.ids]]); // one Redis round trip for the call
  });

  it('packs whole parts into calls of at most 100 campaigns: 12 agents of 10 are two calls', async () => {
    const h = harness();
    const agents = Array.from({ length: 12 }, () => agent(h.shared, 10));
    const outcomes = await Promise.all(agents.map((member) => member.offer()));
    expect(h.calls.map((call) => call.ids.length)).toEqual([100, 20]);
    expect(outcomes.every((outcome) => outcome?.confirmed.length === 10)).toBe(true);
  });

  it('waits for agents still being recorded before it sends a call smaller than 100', async () => {
    const h = harness();
    const early = agent(h.shared, 10);
    const late = agent(h.shared, 10);
    const first = early.offer();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(h.calls).toHaveLength(0); // the other agent is still being recorded
    await Promise.all([first, late.offer()]);
    expect(h.calls.map((call) => call.ids.length)).toEqual([20]);
  });

  it('has at most callsInFlight of its calls in slots: the others are sent as those end', async () => {
    const answered = Promise.withResolvers<void>();
    const h = harness(new Set(), { callsInFlight: 2, answered: answered.promise });
    const agents = Array.from({ length: 50 }, () => agent(h.shared, 10));
    const outcomes = Promise.all(agents.map((member) => member.offer()));
    await vi.waitFor(() => expect(h.calls).toHaveLength(2));
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(h.calls).toHaveLength(2); // three more calls are formed, and wait
    answered.resolve();
    await outcomes;
    expect(h.calls.map((call) => call.ids.length)).toEqual([100, 100, 100, 100, 100]);
  });

  it('sends as many of its waiting calls as its share allows once the share grows (no other network changing anything)', async () => {
    let share = 1;
    const answers: Array<() => void> = [];
    const h = harness(new Set(), { callsInFlight: () => share, answer: () => new Promise<void>((resolve) => answers.push(resolve)) });
    const agents = Array.from({ length: 50 }, () => agent(h.shared, 10));
    const outcomes = Promise.all(agents.map((member) => member.offer()));
    await vi.waitFor(() => expect(h.calls).toHaveLength(1), { timeout: patience(5_000) });
    share = 4;
    answers[0]!();
    // The four calls that waited all go as the first ends, not one after another.
    await vi.waitFor(() => expect(h.calls).toHaveLength(5), { timeout: patience(5_000) });
    for (const answer of answers.slice(1)) answer();
    await outcomes;
    expect(h.calls.map((call) => call.ids.length)).toEqual([100, 100, 100, 100, 100]);
  });

  it('keeps a fifth of the slots free for other networks, and takes only that fifth while one changes something', () => {
    // The default capacity: 13 alone, 3 beside another network.
    expect([batchCallsInFlight(16, false), batchCallsInFlight(16, true)]).toEqual([13, 3]);
    expect([batchCallsInFlight(100, false), batchCallsInFlight(100, true)]).toEqual([80, 20]);
    // Under five slots the fifth is still one; with one slot there is nothing to keep.
    expect([batchCallsInFlight(4, false), batchCallsInFlight(4, true)]).toEqual([3, 1]);
    expect([batchCallsInFlight(1, false), batchCallsInFlight(1, true)]).toEqual([1, 1]);
  });
});
