import { performance } from 'node:perf_hooks';
// The disable protocol's decisions, with the statements over in-memory maps (no database, no build):
// a claim taken or joined, a run superseded, the deadline, a locked agent row, and the answer each
// outcome becomes.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { AnswerClock } from '../../src/agents/answer-clock.js';
import { ClaimCheck } from '../../src/agents/claim-check.js';
import { createDisableProtocol } from '../../src/agents/disable-protocol.js';
import { AgentNotInNetwork, DisableIncomplete, DisableSuperseded, type SetAgentStatusCommand } from '../../src/agents/set-agent-status.js';
import { type Clock, systemClock } from '../../src/clock.js';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { fakeClock } from '../support/clock.js';
import { inMemoryStores } from '../support/in-memory-stores.js';
import { patience } from '../support/wait.js';

const networkId = '6f1c2b9e-5d4a-4e8f-9a7b-1c2d3e4f5a6b';

/**
 * The protocol as the service composes it (src/agents/disable-protocol.ts), over in-memory
 * statements and a fake spend management that answers after `delayMs`.
 */
function protocol(options: { slots?: number; delayMs?: number; clock?: Clock; fenceMs?: number } = {}) {
  const clock = options.clock ?? systemClock;
  const stores = inMemoryStores();
  const calls: Array<{ ids: readonly string[]; at: number; recorded: boolean }> = [];
  const { runner, useCase } = createDisableProtocol({
    settings: {
      breaker: {
        consecutiveFailures: 5,
        errorThresholdPercentage: 50,
        volumeThreshold: 3,
        resetTimeoutMs: 10_000,
        rollingWindowMs: 30_000,
      },
      pipeline: { batchesInFlight: 4, spendManagementMaxConcurrency: options.slots ?? 16, workerCallMaxWaitMs: 1_000 },
      worker: {
        pollIntervalMs: 1_000,
        leaseMs: 10_000,
        backoffBaseMs: 10,
        backoffMaxMs: 20,
        concurrency: 1,
        claimCheckMaxAgeMs: options.fenceMs ?? 1_000,
      },
      disablesInFlightPerNetwork: 8,
      batchBudgetMs: 50,
      flagRetryMs: 10,
      waitPollMs: 10,
      answerMarginMs: 100,
    },
    owner: 'unit',
    stores,
    // These tests make single changes only: a bulk change's statements are the integration tests'.
    agentBatches: {
      enableMany: () => Promise.reject(new Error('no bulk change in the unit tests')),
      disableMany: () => Promise.reject(new Error('no bulk change in the unit tests')),
      markPausedMany: () => Promise.reject(new Error('no bulk change in the unit tests')),
    },
    workerStores: stores,
    spendManagement: {
      pauseSpendingPeriods: async (ids, callKey) => {
        calls.push({ ids, at: Date.now(), recorded: stores.recorded.get(callKey)?.campaignIds.join() === ids.join() });
        stores.statements.push('spend_call');
        await new Promise((resolve) => setTimeout(resolve, options.delayMs ?? 0));
        return { confirmed: [...ids] };
      },
    },
    campaignState: { markPaused: async (ids) => ({ confirmed: [...ids] }) },
    expiredKeys: { purgeExpired: async () => 0 },
    metrics: createMetrics({ collectDefaults: false }),
    log: createLogger('silent'),
    clock,
  });
  // The default deadline is no test's subject: it stretches with the load, as the suite's waits do
  // (beside a second suite a repeat once waited 5 s for the run it joined).
  const command = (
    agentId: string,
    enabled: boolean,
    deadlineMs = patience(5_000),
  ): SetAgentStatusCommand & { respondAsync?: undefined } => ({
    networkId,
    agentId,
    enabled,
    partnerName: 'unit',
    requestId: undefined,
    deadline: clock.now() + deadlineMs,
  });
  return { stores, calls, runner, useCase, command };
}

describe('the disable protocol, without a database', () => {
  it('takes the claim, checks it inside the slot before every call, pauses everything and finishes the pending row', async () => {
    const { stores, calls, useCase, command } = protocol({ slots: 1 });
    const { agentId } = stores.seed(networkId, 250);
    const status = await useCase.setAgentStatus(command(agentId, false));
    expect(status).toMatchObject({ enabled: false, pausedCampaignCount: 250 });
    expect(calls).toHaveLength(3);
    // One slot: each call waits for the one before, and a check made after its slot was granted
    // (a read while the lease is fresh) stands between every two calls.
    const sinceLastCall = stores.statements
      .join(' ')
      .split('spend_call')
      .slice(0, 3)
      .map((between) => /check_claim|renew_lease/.test(between));
    expect(sinceLastCall).toEqual([true, true, true]);
    expect(stores.pending.has(agentId)).toBe(false);
    expect(stores.approved(agentId)).toBe(false);
    // Every call was in the call record (its key, its exact campaigns) when it started, and every mark took its record out.
    expect(calls.map((call) => call.recorded)).toEqual([true, true, true]);
    expect(stores.recorded.size).toBe(0);
  });

  it('a repeat while the run goes on in this replica joins it: one set of calls, the repeat counts nothing', async () => {
    const { stores, calls, useCase, command } = protocol({ delayMs: 20 });
    const { agentId } = stores.seed(networkId, 250);
    const [first, repeat] = await Promise.all([
      useCase.setAgentStatus(command(agentId, false)),
      new Promise((resolve) => setTimeout(resolve, 5)).then(() => useCase.setAgentStatus(command(agentId, false))),
    ]);
    expect(first.pausedCampaignCount).toBe(250);
    expect(repeat.pausedCampaignCount).toBe(0);
    expect(calls.reduce((sum, call) => sum + call.ids.length, 0)).toBe(250);
  });

  it('an enable supersedes the run: no call starts after the enable answered, and the disable answers 409 with its count', async () => {
    const { stores, calls, useCase, command } = protocol({ slots: 1, delayMs: 30 });
    const { agentId } = stores.seed(networkId, 500);
    const disable = useCase.setAgentStatus(command(agentId, false)).catch((error: unknown) => error);
    while (calls.length === 0) await new Promise((resolve) => setTimeout(resolve, 1));
    await useCase.setAgentStatus(command(agentId, true));
    const enabledAt = Date.now();
    const outcome = await disable;
    expect(outcome).toBeInstanceOf(DisableSuperseded);
    expect(calls.filter((call) => call.at > enabledAt)).toEqual([]);
    expect((outcome as DisableSuperseded).pausedCampaignCount).toBe(stores.pausedCount(agentId));
    expect(stores.approved(agentId)).toBe(true);
  });

  it('answers by its deadline with what it paused and what is left, while the run goes on', async () => {
    const { stores, useCase, command, runner } = protocol({ slots: 1, delayMs: 150 });
    const { agentId } = stores.seed(networkId, 1_000);
    const started = Date.now();
    const outcome = await useCase.setAgentStatus(command(agentId, false, 600)).catch((error: unknown) => error);
    expect(Date.now() - started).toBeLessThan(600);
    expect(outcome).toBeInstanceOf(DisableIncomplete);
    const incomplete = outcome as DisableIncomplete;
    expect(incomplete.runCause).toEqual({ kind: 'deadline' });
    expect(incomplete.pausedCampaignCount + (incomplete.remainingCampaignCount ?? 0)).toBe(1_000);
    await runner.idle();
    expect(stores.pending.has(agentId)).toBe(true); // left for the worker
  });

  it('records the disable while another transaction holds the agent row, answers "agent locked", and a later run sets the flag first', async () => {
    const { stores, useCase, command } = protocol();
    const { agentId } = stores.seed(networkId, 120);
    stores.lockedAgents.add(agentId);
    const outcome = await useCase.setAgentStatus(command(agentId, false, 400)).catch((error: unknown) => error);
    expect(outcome).toBeInstanceOf(DisableIncomplete);
    expect((outcome as DisableIncomplete).runCause).toEqual({ kind: 'agent_locked' });
    expect((outcome as DisableIncomplete).pausedCampaignCount).toBe(0);
    expect(stores.pending.has(agentId)).toBe(true);
    expect(stores.approved(agentId)).toBe(true);
    expect(stores.pausedCount(agentId)).toBe(0); // nothing paused before the flag
    // The lock frees while the request's run still waits for it: the run sets the flag, then pauses;
    // a repeat joins that run and answers once it is done.
    stores.lockedAgents.delete(agentId);
    const repeat = await useCase.setAgentStatus(command(agentId, false));
    expect(repeat.enabled).toBe(false);
    expect(stores.approved(agentId)).toBe(false);
    expect(stores.pausedCount(agentId)).toBe(120);
    expect(stores.pending.has(agentId)).toBe(false);
  });

  it('reads Prefer only once the disable is recorded: never for an agent of another network', async () => {
    const { stores, useCase, command } = protocol({ slots: 1, delayMs: 50 });
    const { agentId: foreign } = stores.seed('0b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e', 10);
    let reads = 0;
    const respondAsync = () => {
      reads += 1;
      return { acceptAt: performance.now() };
    };
    const outcome = await useCase.setAgentStatus({ ...command(foreign, false), respondAsync }).catch((error: unknown) => error);
    expect(outcome).toBeInstanceOf(AgentNotInNetwork);
    expect(reads).toBe(0);

    const { agentId } = stores.seed(networkId, 500);
    const accepted = await useCase.setAgentStatus({ ...command(agentId, false), respondAsync });
    expect(accepted).toHaveProperty('accepted.disableInProgress', true);
    expect(reads).toBe(1);
    // A preference without respond-async: read once, then the plain answer.
    const { agentId: plain } = stores.seed(networkId, 5);
    const answer = await useCase.setAgentStatus({
      ...command(plain, false),
      respondAsync: () => {
        reads += 1;
        return undefined;
      },
    });
    expect(answer).toEqual({ agentId: plain, networkId, enabled: false, pausedCampaignCount: 5 });
    expect(reads).toBe(2);
  });
});

describe("the protocol's timings on a clock the test holds", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('answers a disable by its deadline on the clock: ten minutes of deadline pass in no real time', async () => {
    const clock = fakeClock();
    // Spend management answers each call after a minute of the test's clock.
    const { stores, useCase, command, runner } = protocol({ slots: 1, delayMs: 60_000, clock });
    const { agentId } = stores.seed(networkId, 1_000);
    const startedAt = performance.now();
    const outcome = useCase.setAgentStatus(command(agentId, false, 600_000)).catch((error: unknown) => error);
    await vi.advanceTimersByTimeAsync(600_000);
    const incomplete = (await outcome) as DisableIncomplete;
    expect(incomplete).toBeInstanceOf(DisableIncomplete);
    expect(incomplete.runCause).toEqual({ kind: 'deadline' });
    expect(incomplete.pausedCampaignCount + (incomplete.remainingCampaignCount ?? 0)).toBe(1_000);
    expect(performance.now() - startedAt).toBeLessThan(5_000);
    runner.stopBy(clock.now());
    await vi.advanceTimersByTimeAsync(120_000);
    await runner.idle();
  });

  it('an enable that superseded a run waits the fence (claimCheckMaxAgeMs) on the clock before it answers, and no longer', async () => {
    const clock = fakeClock();
    const { stores, useCase, command, calls, runner } = protocol({ slots: 1, delayMs: 1_000, clock, fenceMs: 30_000 });
    const { agentId } = stores.seed(networkId, 500);
    const disable = useCase.setAgentStatus(command(agentId, false, 600_000)).catch((error: unknown) => error);
    await vi.advanceTimersByTimeAsync(1);
    expect(calls.length).toBeGreaterThan(0);
    let answered = false;
    const enable = useCase.setAgentStatus(command(agentId, true, 600_000)).then(() => {
      answered = true;
    });
    await vi.advanceTimersByTimeAsync(29_000);
    expect(answered).toBe(false);
    await vi.advanceTimersByTimeAsync(1_500);
    expect(answered).toBe(true);
    await enable;
    await vi.advanceTimersByTimeAsync(5_000);
    expect(await disable).toBeInstanceOf(DisableSuperseded);
    await runner.idle();
  });

  it('AnswerClock: the deadline less its margin, or the shutdown when it comes first', async () => {
    const clock = fakeClock();
    const shutdown = { stopTime: Number.POSITIVE_INFINITY, signal: new AbortController().signal };
    const answers = new AnswerClock(shutdown, 500, clock);
    const never = new Promise<number>(() => undefined);
    const byDeadline = answers.race(never, clock.now() + 10_000);
    await vi.advanceTimersByTimeAsync(9_499);
    expect(await Promise.race([byDeadline, 'waiting'])).toBe('waiting');
    await vi.advanceTimersByTimeAsync(1);
    expect(await byDeadline).toBe('deadline');
    expect(answers.tooLateToWait(clock.now() + 1_000, 200)).toBeUndefined();
    expect(answers.tooLateToWait(clock.now() + 600, 200)).toBe('deadline');

    const controller = new AbortController();
    const stopping = { stopTime: Number.POSITIVE_INFINITY, signal: controller.signal };
    const race = new AnswerClock(stopping, 500, clock).race(never, clock.now() + 60_000);
    stopping.stopTime = clock.now() + 2_000;
    controller.abort();
    await vi.advanceTimersByTimeAsync(1_500);
    expect(await race).toBe('shutdown');
  });

  it('ClaimCheck: only checks a fresh lease, renews it once a third of it is gone on the clock', async () => {
    const clock = fakeClock();
    const renewals: boolean[] = [];
    const queue = {
      checkClaim: async (_agentId: string, _lease: unknown, renew: boolean) => {
        renewals.push(renew);
        return true;
      },
    };
    const lease = { claimToken: 't', owner: 'unit', leaseMs: 30_000 };
    const check = new ClaimCheck(queue, 'a', lease, { claimLost: () => undefined, failed: () => undefined }, clock);
    const batch = { campaignIds: ['c'], callKey: 'k' };
    await check.check(batch);
    await vi.advanceTimersByTimeAsync(9_000);
    await check.check(batch);
    await vi.advanceTimersByTimeAsync(2_000);
    await check.check(batch);
    await check.check(batch);
    expect(renewals).toEqual([false, false, true, false]);
  });
});
