import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { context, propagation, SpanStatusCode, trace } from '@opentelemetry/api';
import { DependencyError } from '../observability/dependency-calls.js';
import type { AgentRepository, AgentStatusView, ChangeConditions, StatusChangeRow } from '../stores/database.js';
import type { DisableQueue } from '../stores/disable-queue.js';
import type { SentPauses } from '../stores/sent-pauses.js';
import type { DisableRunner, RunCause, RunEnd, RunStores } from './disable-runs.js';
import { ChangeFailure, isFault, outcomeOf } from './outcomes.js';

/** The agent does not exist in the partner's network (whether or not it exists in another one). */
export class AgentNotInNetwork extends ChangeFailure {
  override readonly name = 'AgentNotInNetwork';
  readonly outcome = 'not_found';
  readonly problem = 'notFound';
  constructor() {
    super('agent not found in the partner network');
  }
}

/** The network already has its allowance of disables running in this replica (docs/interfaces.md §10). */
export class TooManyDisables extends ChangeFailure {
  override readonly name = 'TooManyDisables';
  readonly outcome = 'limited';
  readonly problem = 'tooManyDisables';
  constructor(readonly limit: number) {
    super(`at most ${limit} agents of one network are disabled at once`);
  }
}

/** The agent is disabled, but not every campaign is paused yet; the service goes on by itself. */
export class DisableIncomplete extends ChangeFailure {
  override readonly name = 'DisableIncomplete';
  readonly outcome = 'failed';
  readonly problem = 'dependencyFailure';
  constructor(
    readonly pausedCampaignCount: number,
    readonly remainingCampaignCount: number | undefined,
    readonly runCause: RunCause,
  ) {
    super(`disable incomplete: ${runCause.kind}`);
  }
}

/** If-Match named a change that is no longer the agent's latest: nothing was changed (docs/interfaces.md §11). */
export class PreconditionFailed extends ChangeFailure {
  override readonly name = 'PreconditionFailed';
  readonly outcome = 'precondition_failed';
  readonly problem = 'preconditionFailed';
  constructor() {
    super('the agent changed since the tag given in If-Match');
  }
}

/** An enable answered after this disable was requested: its pausing stopped (docs/interfaces.md §9). */
export class DisableSuperseded extends ChangeFailure {
  override readonly name = 'DisableSuperseded';
  readonly outcome = 'superseded';
  readonly problem = 'superseded';
  constructor(readonly pausedCampaignCount: number) {
    super('disable superseded by a later enable');
  }
}

export interface SetAgentStatusCommand {
  networkId: string;
  agentId: string;
  enabled: boolean;
  /** The key's label and the response's x-request-id, for the audit trail. */
  partnerName: string;
  requestId: string | undefined;
  /** Monotonic ms (performance.now()) by which the request must be answered. */
  deadline: number;
  /**
   * Prefer: respond-async (docs/interfaces.md §11), disables only: from `acceptAt` (monotonic ms, performance.now(); now, or
   * the request's arrival plus its `wait`) a disable that is recorded, flagged and has campaigns
   * left to pause answers 202 with its status while pausing goes on. Asked for lazily, once the
   * disable is recorded (so the agent is known to be of the network: the preference is never read
   * for another network's agent); undefined there means no preference.
   */
  respondAsync?: () => { acceptAt: number } | undefined;
  /** If-Match and the idempotency key's claim. */
  conditions?: ChangeConditions;
  /**
   * The change this request's idempotency key already made (a repeat that took over the claim of a
   * request whose replica died before answering): nothing is changed or recorded again; an enable
   * answers as it did, a disable waits for its pausing as a repeat does.
   */
  madeAs?: string;
}

export interface AgentStatus {
  agentId: string;
  networkId: string;
  enabled: boolean;
  pausedCampaignCount: number;
}

/** A disable answered 202 (Prefer: respond-async): its status when it was accepted. */
export interface AcceptedDisable {
  accepted: AgentStatusView;
}

/** The status with the id of the agent's latest change, which the ETag names. */
export type AgentStatusRead = AgentStatusView & { latestChangeId: string };

export interface AgentStatusDeps {
  agents: AgentRepository;
  queue: DisableQueue;
  sentPauses: SentPauses;
  runner: DisableRunner;
  disablesInFlightPerNetwork: number;
  /** How long an enable that superseded a disable waits after its commit before it answers (claimCheckMaxAgeMs). */
  supersedeFenceMs: number;
  /** Campaigns one read fetches (readAheadSize): the recording statement reads one more. */
  readAhead: number;
  /** How often a request that waits for another replica's run looks again. */
  waitPollMs?: number;
  /** How long before its deadline a request stops waiting, to count what is left and answer. */
  answerMarginMs?: number;
}

const tracer = trace.getTracer('partner-agent-status');

/** Waits until `until`, but never past the request's deadline (both on the monotonic clock). */
function sleepUntil(until: number, deadline: number): Promise<void> {
  const ms = Math.min(until, deadline) - performance.now();
  return ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms)) : Promise.resolve();
}

/**
 * Enables or disables one agent of the partner's network (specification sections 3 and 4;
 * docs/interfaces.md §7, §9 and §10).
 *
 * Nothing here waits on anything before the statement that checks the network: a request of
 * another network never joins, waits for or counts against this network's runs, so neither its
 * latency nor its 404 tells anything about agents elsewhere.
 */
export function createAgentStatusUseCase(deps: AgentStatusDeps) {
  const { agents, queue, runner } = deps;
  const stores: RunStores = { agents, queue, sentPauses: deps.sentPauses };
  const waitPollMs = deps.waitPollMs ?? 200;
  /** How often a disable waiting to answer 202 looks at its progress. */
  const acceptPollMs = 100;
  const answerMarginMs = deps.answerMarginMs ?? 500;
  /** networkId → agentId → requests of that agent holding the network's allowance. */
  const disabling = new Map<string, Map<string, number>>();

  function reserve(networkId: string, agentId: string): () => void {
    const local = runner.active(agentId);
    if (local && local.networkId === networkId) return () => undefined; // joins a run: does not count
    let agentsOfNetwork = disabling.get(networkId);
    const holders = agentsOfNetwork?.get(agentId) ?? 0;
    if (holders === 0 && (agentsOfNetwork?.size ?? 0) >= deps.disablesInFlightPerNetwork) {
      throw new TooManyDisables(deps.disablesInFlightPerNetwork);
    }
    if (!agentsOfNetwork) {
      agentsOfNetwork = new Map();
      disabling.set(networkId, agentsOfNetwork);
    }
    const held = agentsOfNetwork;
    held.set(agentId, holders + 1);
    return () => {
      const left = (held.get(agentId) ?? 1) - 1;
      if (left > 0) held.set(agentId, left);
      else held.delete(agentId);
      if (held.size === 0 && disabling.get(networkId) === held) disabling.delete(networkId);
    };
  }

  function currentTraceParent(): string | null {
    const carrier: Record<string, string> = {};
    propagation.inject(context.active(), carrier);
    return carrier.traceparent ?? null;
  }

  /** What a disable request knows while it runs, so that it can answer at any moment. */
  interface Progress {
    paused: number;
    /** Active, unpaused campaigns when the disable was recorded (an estimate of what is left). */
    unpausedAtStart: number | undefined;
    /** Whether agent_approved = false is known to be committed. */
    flagged: boolean;
    /** Called when the statement has answered or the flag is set (Prefer: respond-async). */
    changed?: () => void;
  }

  async function disable(command: SetAgentStatusCommand): Promise<number | AcceptedDisable> {
    const { networkId, agentId } = command;
    const release = reserve(networkId, agentId);
    const progress: Progress = { paused: 0, unpausedAtStart: undefined, flagged: false };
    const answer = withinDeadline(command, progress, disableSteps(command, progress));
    // The allowance is held until the request's own run ends, even after a 202.
    void answer.then(release, release);
    if (!command.respondAsync) return answer;
    const accepted = acceptance(command.respondAsync, progress);
    try {
      const first = await Promise.race([answer, accepted.promise]);
      if (typeof first === 'number') return first;
      // Answered 202: the rest of the run is its own business (its end is logged by the runner).
      answer.catch(() => undefined);
      const left = Math.max(0, (progress.unpausedAtStart ?? 0) - progress.paused);
      return {
        accepted: { agentId, networkId, enabled: false, activeUnpausedCampaignCount: left, disableInProgress: true },
      };
    } finally {
      accepted.cancel();
    }
  }

  /**
   * Resolves once a 202 may be given: the disable is recorded and its flag committed, campaigns
   * were left to pause when it was recorded (otherwise the plain answer comes at once), and the
   * wait the partner asked for is over. Looks at the progress a few times a second. The
   * preference is read once the disable is recorded; without one it never resolves.
   */
  function acceptance(preference: () => { acceptAt: number } | undefined, progress: Progress) {
    let timer: NodeJS.Timeout | undefined;
    let acceptAt: number | undefined;
    let read = false;
    const promise = new Promise<'accepted'>((resolve) => {
      const look = () => {
        clearTimeout(timer);
        const recorded = progress.unpausedAtStart !== undefined && progress.flagged;
        if (!recorded) {
          timer = setTimeout(look, acceptPollMs);
          return;
        }
        if (!read) {
          read = true;
          acceptAt = preference()?.acceptAt;
        }
        if (acceptAt === undefined) return; // no preference after all: the plain answer comes
        if (progress.unpausedAtStart! > 0 && performance.now() >= acceptAt) return resolve('accepted');
        timer = setTimeout(look, Math.max(0, Math.min(acceptPollMs, acceptAt - performance.now())));
      };
      progress.changed = look;
      look();
    });
    return {
      promise,
      cancel: () => {
        clearTimeout(timer);
        progress.changed = undefined;
      },
    };
  }

  /**
   * Every request is answered by its deadline, and at once when the replica starts shutting down,
   * whatever it waits on (a run, another replica, a statement that does not answer): the disable
   * is recorded by then, so the answer is a 500 with what is known, and the work goes on by itself.
   */
  async function withinDeadline(command: SetAgentStatusCommand, progress: Progress, work: Promise<number>): Promise<number> {
    const signal = runner.shutdownSignal;
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const late = new Promise<'deadline' | 'shutdown'>((resolve) => {
      const answerBy = () => {
        clearTimeout(timer);
        const shutdownFirst = runner.stopTime < command.deadline;
        const at = Math.min(command.deadline, runner.stopTime) - answerMarginMs;
        timer = setTimeout(() => resolve(shutdownFirst ? 'shutdown' : 'deadline'), Math.max(0, at - performance.now()));
      };
      answerBy();
      onAbort = answerBy;
      if (!signal.aborted) signal.addEventListener('abort', onAbort, { once: true });
    });
    // The work's own end, once the answer is given, is the run's business (logged by its owner).
    work.catch(() => undefined);
    try {
      const first = await Promise.race([work, late]);
      if (typeof first === 'number') return first;
      // The statement that records the disable has not answered yet: nothing is known to be recorded.
      if (progress.unpausedAtStart === undefined) {
        throw new DependencyError('postgres', 'timeout', 'disable_agent: no answer by the request deadline');
      }
      // Still waiting for the agent row another transaction holds: recorded, not yet flagged.
      const kind = first === 'deadline' && !progress.flagged ? 'agent_locked' : first;
      throw new DisableIncomplete(progress.paused, await remainingWithin(command.agentId, progress), { kind });
    } finally {
      clearTimeout(timer);
      if (onAbort) signal.removeEventListener('abort', onAbort);
    }
  }

  /** What is left to pause, estimated from the count the recording statement read. */
  function estimatedRemaining(progress: Progress): number | undefined {
    return progress.unpausedAtStart === undefined ? undefined : Math.max(0, progress.unpausedAtStart - progress.paused);
  }

  /** What is left to pause, from the database if it answers quickly, else estimated. */
  async function remainingWithin(agentId: string, progress: Progress): Promise<number | undefined> {
    const estimate = estimatedRemaining(progress);
    let timer: NodeJS.Timeout | undefined;
    const fallback = new Promise<number | undefined>((resolve) => {
      timer = setTimeout(() => resolve(estimate), Math.max(50, answerMarginMs - 100));
    });
    const counted = agents.remainingCampaigns(agentId).catch(() => estimate);
    try {
      return await Promise.race([counted, fallback]);
    } finally {
      clearTimeout(timer);
    }
  }

  function incomplete(end: Extract<RunEnd, { kind: 'incomplete' }>, progress: Progress): DisableIncomplete {
    return new DisableIncomplete(progress.paused, end.remaining ?? estimatedRemaining(progress), end.cause);
  }

  /** Drives the pipeline for the claim this request holds, counting what it moves. */
  function runHere(
    command: SetAgentStatusCommand,
    progress: Progress,
    claim: { claimToken: string; flagged: boolean; firstBatch?: string[] },
  ): Promise<RunEnd> {
    return runner.run({
      agentId: command.agentId,
      networkId: command.networkId,
      partnerName: command.partnerName,
      stores,
      ...claim,
      stopAt: command.deadline,
      onPaused: (moved) => {
        progress.paused += moved;
      },
      onFlagged: () => {
        progress.flagged = true;
        progress.changed?.();
      },
    });
  }

  async function disableSteps(command: SetAgentStatusCommand, progress: Progress): Promise<number> {
    const { networkId, agentId } = command;
    if (command.madeAs !== undefined) {
      // Recorded by an earlier holder of the idempotency key: only what a repeat does is left. The
      // flag is read, never assumed: that holder may have died before it could set it (an agent
      // row held by another transaction), and then a 202 waits until a run here sets it.
      const status = await agents.readStatus(networkId, agentId);
      if (!status) throw new AgentNotInNetwork();
      progress.unpausedAtStart = status.activeUnpausedCampaignCount;
      progress.flagged = !status.enabled;
      progress.changed?.();
      return await waitForOtherRuns(command, command.madeAs, progress);
    }
    const claimToken = randomUUID();
    const outcome = await agents.disable(
      networkId,
      agentId,
      { partnerName: command.partnerName, requestId: command.requestId },
      { ...runner.lease(claimToken), traceParent: currentTraceParent() },
      // One more than a chunk: the run then knows whether more follow without another statement.
      deps.readAhead + 1,
      command.conditions,
    );
    if (!outcome) throw new AgentNotInNetwork();
    if (outcome === 'precondition_failed') throw new PreconditionFailed();
    progress.unpausedAtStart = outcome.unpaused;
    progress.flagged = outcome.flagged;
    progress.changed?.();
    // From here on the disable is recorded: whatever fails, the answer carries the counts.
    try {
      if (outcome.claimed) {
        const end = await runHere(command, progress, {
          claimToken,
          flagged: outcome.flagged,
          firstBatch: outcome.flagged ? outcome.firstBatch : undefined,
        });
        if (end.kind === 'completed') return progress.paused;
        if (end.kind === 'incomplete') throw incomplete(end, progress);
      }
      return await waitForOtherRuns(command, outcome.changeId, progress);
    } catch (error) {
      if (error instanceof DependencyError) {
        throw new DisableIncomplete(progress.paused, await remainingWithin(agentId, progress), { kind: 'dependency', error });
      }
      throw error;
    }
  }

  /**
   * Another run holds the claim (a repeated request, the worker, or another replica). Join it when
   * it runs here; otherwise look again until the pending row is gone (finished, or superseded by
   * an enable) or free to take over (its holder died or gave up), within the request's deadline.
   */
  async function waitForOtherRuns(command: SetAgentStatusCommand, changeId: string, progress: Progress): Promise<number> {
    const { networkId, agentId, deadline } = command;
    for (;;) {
      if (await queue.enabledSince(agentId, changeId)) throw new DisableSuperseded(progress.paused);
      const local = runner.active(agentId);
      if (local && local.networkId === networkId) {
        const end = await local.done;
        if (end.kind === 'completed') return progress.paused;
        if (end.kind === 'incomplete') throw incomplete(end, progress);
        continue;
      }
      const claimToken = randomUUID();
      const state = await queue.takeOver(agentId, runner.lease(claimToken));
      if (state.claimed) {
        const end = await runHere(command, progress, { claimToken, flagged: false });
        if (end.kind === 'completed') return progress.paused;
        if (end.kind === 'incomplete') throw incomplete(end, progress);
        continue;
      }
      if (!state.pending) {
        if (await queue.enabledSince(agentId, changeId)) throw new DisableSuperseded(progress.paused);
        return progress.paused;
      }
      if (Math.min(deadline, runner.stopTime) - performance.now() <= waitPollMs + answerMarginMs) {
        throw new DisableIncomplete(progress.paused, await remainingWithin(agentId, progress), {
          kind: runner.stopTime < deadline ? 'shutdown' : 'deadline',
        });
      }
      await new Promise((resolve) => setTimeout(resolve, waitPollMs));
    }
  }

  function setAgentStatus(command: SetAgentStatusCommand & { respondAsync?: undefined }): Promise<AgentStatus>;
  function setAgentStatus(command: SetAgentStatusCommand): Promise<AgentStatus | AcceptedDisable>;
  function setAgentStatus(command: SetAgentStatusCommand): Promise<AgentStatus | AcceptedDisable> {
    const { networkId, agentId, enabled } = command;
    return tracer.startActiveSpan('agent.set_status', async (span) => {
      span.setAttributes({ 'agent.id': agentId, 'network.id': networkId, 'agent.enabled': enabled });
      try {
        let pausedCampaignCount = 0;
        if (enabled) {
          // An enable made already (madeAs) answers as it did: it is never made a second time.
          if (command.madeAs === undefined) {
            const author = { partnerName: command.partnerName, requestId: command.requestId };
            const done = await agents.enable(networkId, agentId, author, command.conditions);
            if (done === 'precondition_failed') throw new PreconditionFailed();
            if (!done) throw new AgentNotInNetwork();
            // The enable's fence (docs/interfaces.md §9): a run of the disable it superseded may
            // have had its claim check answered just before this commit; no call starts on an
            // answer older than claimCheckMaxAgeMs, so once that much has passed since the commit
            // no call of that run can start any more, and only then does the enable answer.
            if (done.supersededDisable) await sleepUntil(performance.now() + deps.supersedeFenceMs, command.deadline);
          }
        } else {
          const result = await disable(command);
          if (typeof result !== 'number') {
            span.setAttribute('disable.accepted', true);
            return result;
          }
          pausedCampaignCount = result;
        }
        span.setAttribute('campaigns.paused_count', pausedCampaignCount);
        return { agentId, networkId, enabled, pausedCampaignCount };
      } catch (error) {
        if (error instanceof DisableIncomplete || error instanceof DisableSuperseded) {
          span.setAttribute('campaigns.paused_count', error.pausedCampaignCount);
        }
        if (isFault(outcomeOf(error))) {
          span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error).message });
        }
        throw error;
      } finally {
        span.end();
      }
    });
  }

  async function readAgentStatus(networkId: string, agentId: string): Promise<AgentStatusRead> {
    const status = await agents.readStatus(networkId, agentId);
    if (!status) throw new AgentNotInNetwork();
    return status;
  }

  /** The agent's change rows, newest first, `limit` of them before the change `before` (docs/interfaces.md §11). */
  async function readStatusChanges(networkId: string, agentId: string, before: string | null, limit: number) {
    // One more than asked: when it comes back, there is a next page.
    const rows: StatusChangeRow[] | undefined = await agents.statusChanges(networkId, agentId, before, limit + 1);
    if (!rows) throw new AgentNotInNetwork();
    const page = rows.slice(0, limit);
    return { changes: page, nextBefore: rows.length > limit ? page.at(-1)!.changeId : null };
  }

  return { setAgentStatus, readAgentStatus, readStatusChanges };
}

export type AgentStatusUseCase = ReturnType<typeof createAgentStatusUseCase>;
