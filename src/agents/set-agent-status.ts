// The use case: enable or disable one agent of the partner's network, and read its status and changes.
import { context, propagation, SpanStatusCode, trace } from '@opentelemetry/api';
import type { Clock } from '../clock.js';
import { DependencyError } from '../observability/dependency-calls.js';
import type { AgentRepository, AgentStatusView, ChangeConditions, Lease, StatusChangeRow } from '../stores/agent-repository.js';
import type { DisableQueue } from '../stores/disable-queue.js';
import { forNetwork, PoolWaitExceeded, waitingUntil } from '../stores/pool-wait.js';
import type { SentPauses } from '../stores/sent-pauses.js';
import type { ActiveNetworks } from './active-networks.js';
import { AnswerClock, type DisableProgress, estimatedRemaining, type ShutdownClock, sleepUntil } from './answer-clock.js';
import type { BulkRecorder } from './bulk-recorder.js';
import type { RunCause, RunEnd, RunRequest, RunStores } from './disable-run.js';
import type { SharedMarks } from './mark-queue.js';
import { NetworkAllowance } from './network-allowance.js';
import { ChangeFailure, isFault, outcomeOf } from './outcomes.js';
import type { SharedCalls } from './shared-calls.js';

/** The agent does not exist in the partner's network (whether or not it exists in another one). */
export class AgentNotInNetwork extends ChangeFailure {
  override readonly name = 'AgentNotInNetwork';
  readonly outcome = 'not_found';
  constructor() {
    super('agent not found in the partner network');
  }
}

/** The network already has its allowance of disables running in this replica (docs/interfaces.md §10). */
export class TooManyDisables extends ChangeFailure {
  override readonly name = 'TooManyDisables';
  readonly outcome = 'limited';
  constructor(readonly limit: number) {
    super(`at most ${limit} agents of one network are disabled at once`);
  }
}

/** The agent is disabled, but not every campaign is paused yet; the service goes on by itself. */
export class DisableIncomplete extends ChangeFailure {
  override readonly name = 'DisableIncomplete';
  readonly outcome = 'failed';
  constructor(
    readonly pausedCampaignCount: number,
    readonly remainingCampaignCount: number | undefined,
    readonly runCause: RunCause,
    /** The status it answers with where an incomplete disable is accepted (a 202: src/http/answers.ts). */
    readonly status: AgentStatusView,
  ) {
    super(`disable incomplete: ${runCause.kind}`);
  }
}

/** If-Match named a change that is no longer the agent's latest: nothing was changed (docs/interfaces.md §11). */
export class PreconditionFailed extends ChangeFailure {
  override readonly name = 'PreconditionFailed';
  readonly outcome = 'precondition_failed';
  constructor() {
    super('the agent changed since the tag given in If-Match');
  }
}

/**
 * The request's Idempotency-Key passed to a repeat (this request outlived its claim's lease, a
 * repeat took the key over) before its change could commit: nothing was changed (docs/interfaces.md §11).
 */
export class IdempotencyKeyLost extends ChangeFailure {
  override readonly name = 'IdempotencyKeyLost';
  readonly outcome = 'key_lost';
  constructor() {
    super('the idempotency key passed to a repeat of this request');
  }
}

/** An enable answered after this disable was requested: its pausing stopped (docs/interfaces.md §9). */
export class DisableSuperseded extends ChangeFailure {
  override readonly name = 'DisableSuperseded';
  readonly outcome = 'superseded';
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
  /** A change of a bulk change (docs/interfaces.md §16): what the batch holds for it. */
  bulk?: BulkChangeSide;
}

/** What a change of a bulk change gets from its batch (src/agents/set-agents-status.ts). */
export interface BulkChangeSide {
  /** The batch holds the network's allowance for this agent already. */
  allowanceHeld: true;
  /** The batch's shared spend-management calls, for a disable's run. */
  shared: SharedCalls;
  /** The batch's shared marks, for a disable's run. */
  sharedMarks: SharedMarks;
  /** Records the change with the batch's others (many agents a statement, in the batch's share of the request pool). */
  recorder: BulkRecorder;
  /** Called once the change is recorded (its change row committed), or known to make none. */
  recorded: () => void;
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

/**
 * What a request needs of the replica's runs (DisableRunner), and nothing more: the read-ahead of
 * the claiming statement, the shutdown it answers by, a lease for a claim, the run of its agent to
 * join, and a run of its own.
 */
export interface RequestRuns {
  /** Campaigns one read fetches: the recording statement reads one more. */
  readonly readAhead: number;
  readonly shutdown: ShutdownClock;
  /** The clock of deadlines, waits and the enable's fence (the runner's). */
  readonly clock: Clock;
  /** A lease for a new claim (a fresh claim token). */
  newLease(): Lease;
  /** The end of this network's run of the agent going on in this replica, if any. */
  joinable(networkId: string, agentId: string): Promise<RunEnd> | undefined;
  run(request: RunRequest): Promise<RunEnd>;
}

export interface AgentStatusDeps {
  agents: AgentRepository;
  queue: DisableQueue;
  sentPauses: SentPauses;
  runs: RequestRuns;
  disablesInFlightPerNetwork: number;
  /** How long an enable that superseded a disable waits after its commit before it answers (claimCheckMaxAgeMs). */
  supersedeFenceMs: number;
  /** How often a request that waits for another replica's run looks again. */
  waitPollMs?: number;
  /** How long before its deadline a request stops waiting, to count what is left and answer. */
  answerMarginMs?: number;
  /** Where each change is counted while it is under way (bulk changes look there). */
  activeNetworks?: ActiveNetworks;
}

const tracer = trace.getTracer('partner-agent-status');

function currentTraceParent(): string | null {
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return carrier.traceparent ?? null;
}

/** What every disable request of the use case shares. */
interface DisableRequestSide {
  agents: AgentRepository;
  queue: DisableQueue;
  stores: RunStores;
  runs: RequestRuns;
  clock: AnswerClock;
  /** The runs' clock, for the waits between looks. */
  time: Clock;
  waitPollMs: number;
}

/**
 * One disable request: records the disable (or finds it recorded), then runs it, joins the run
 * going on here, or waits for another replica's and takes it over when its holder is gone; and
 * answers by its deadline whatever it waits on, with what it knows (its progress).
 */
class DisableRequest {
  private readonly progress: DisableProgress = { paused: 0, unpausedAtStart: undefined, flagged: false };

  constructor(
    private readonly command: SetAgentStatusCommand,
    private readonly side: DisableRequestSide,
  ) {}

  /**
   * The count paused, or a 202's status once Prefer: respond-async allows it. `release` (the
   * network's allowance) is called when the request's own run ends, even after a 202.
   */
  async answer(release: () => void): Promise<number | AcceptedDisable> {
    const { respondAsync } = this.command;
    const answer = this.withinDeadline(this.steps());
    void answer.then(release, release);
    if (!respondAsync) return answer;
    const accepted = this.side.clock.acceptance(respondAsync, this.progress);
    try {
      const first = await Promise.race([answer, accepted.promise]);
      if (typeof first === 'number') return first;
      // Answered 202: the rest of the run is its own business (its end is logged by the runner).
      answer.catch(() => undefined);
      return { accepted: this.inProgress(Math.max(0, (this.progress.unpausedAtStart ?? 0) - this.progress.paused)) };
    } finally {
      accepted.cancel();
    }
  }

  /**
   * Every request is answered by its deadline, and at once when the replica starts shutting down,
   * whatever it waits on (a run, another replica, a statement that does not answer): the disable
   * is recorded by then, so the answer is a 500 with what is known, and the work goes on by itself.
   */
  private async withinDeadline(work: Promise<number>): Promise<number> {
    const first = await this.side.clock.race(work, this.command.deadline);
    if (typeof first === 'number') return first;
    // The statement that records the disable has not answered yet: nothing is known to be recorded.
    if (this.progress.unpausedAtStart === undefined) {
      throw new DependencyError('postgres', 'timeout', 'disable_agent: no answer by the request deadline');
    }
    // Still waiting for the agent row another transaction holds: recorded, not yet flagged.
    const kind = first === 'deadline' && !this.progress.flagged ? 'agent_locked' : first;
    throw await this.incomplete({ kind });
  }

  private async steps(): Promise<number> {
    const { networkId, agentId, madeAs } = this.command;
    if (madeAs !== undefined) {
      // Recorded by an earlier holder of the idempotency key: only what a repeat does is left. The
      // flag is read, never assumed: that holder may have died before it could set it (an agent
      // row held by another transaction), and then a 202 waits until a run here sets it.
      const status = await this.side.agents.readStatus(networkId, agentId);
      if (!status) throw new AgentNotInNetwork();
      this.recorded(status.activeUnpausedCampaignCount, !status.enabled);
      return await this.waitForOtherRuns(madeAs);
    }
    const lease = { ...this.side.runs.newLease(), traceParent: currentTraceParent() };
    // One more than a chunk: the run then knows whether more follow without another statement.
    const batchSize = this.side.runs.readAhead + 1;
    const { bulk } = this.command;
    const outcome = bulk
      ? await bulk.recorder.disable(agentId, { lease, batchSize })
      : await this.side.agents.disable(
          networkId,
          agentId,
          { partnerName: this.command.partnerName, requestId: this.command.requestId },
          lease,
          batchSize,
          this.command.conditions,
        );
    if (!outcome) throw new AgentNotInNetwork();
    if (outcome === 'precondition_failed') throw new PreconditionFailed();
    if (outcome === 'key_lost') throw new IdempotencyKeyLost();
    this.recorded(outcome.unpaused, outcome.flagged);
    // From here on the disable is recorded: whatever fails, the answer carries the counts.
    try {
      if (outcome.claimed) {
        const firstBatch = outcome.flagged ? outcome.firstBatch : undefined;
        const paused = this.settle(await this.runHere({ claimToken: lease.claimToken, flagged: outcome.flagged, firstBatch }));
        if (paused !== undefined) return paused;
      }
      return await this.waitForOtherRuns(outcome.changeId);
    } catch (error) {
      if (error instanceof DependencyError) throw await this.incomplete({ kind: 'dependency', error });
      throw error;
    }
  }

  private recorded(unpaused: number, flagged: boolean): void {
    this.progress.unpausedAtStart = unpaused;
    this.progress.flagged = flagged;
    this.progress.changed?.();
    this.command.bulk?.recorded();
  }

  /**
   * Another run holds the claim (a repeated request, the worker, or another replica). Join it when
   * it runs here; otherwise look again until the pending row is gone (finished, or superseded by
   * an enable) or free to take over (its holder died or gave up), within the request's deadline.
   */
  private async waitForOtherRuns(changeId: string): Promise<number> {
    const { networkId, agentId, deadline } = this.command;
    const { queue, runs, clock } = this.side;
    for (;;) {
      if (await queue.enabledSince(agentId, changeId)) throw new DisableSuperseded(this.progress.paused);
      const local = runs.joinable(networkId, agentId);
      if (local) {
        const paused = this.settle(await local);
        if (paused !== undefined) return paused;
        continue;
      }
      const lease = runs.newLease();
      const state = await queue.takeOver(agentId, lease);
      if (state.claimed) {
        const paused = this.settle(await this.runHere({ claimToken: lease.claimToken, flagged: false }));
        if (paused !== undefined) return paused;
        continue;
      }
      if (!state.pending) {
        if (await queue.enabledSince(agentId, changeId)) throw new DisableSuperseded(this.progress.paused);
        return this.progress.paused;
      }
      const late = clock.tooLateToWait(deadline, this.side.waitPollMs);
      if (late) throw await this.incomplete({ kind: late });
      await this.side.time.sleep(this.side.waitPollMs);
    }
  }

  /** Drives the pipeline for the claim this request holds, counting what it moves. */
  private runHere(claim: { claimToken: string; flagged: boolean; firstBatch?: string[] }): Promise<RunEnd> {
    const { agentId, networkId, partnerName, deadline } = this.command;
    return this.side.runs.run({
      agentId,
      networkId,
      partnerName,
      stores: this.side.stores,
      ...claim,
      stopAt: deadline,
      ...(this.command.bulk ? { shared: this.command.bulk.shared, sharedMarks: this.command.bulk.sharedMarks } : {}),
      onPaused: (moved) => {
        this.progress.paused += moved;
      },
      onFlagged: () => {
        this.progress.flagged = true;
        this.progress.changed?.();
      },
    });
  }

  /**
   * A run's end (DisableRunner.run), as this request answers it: its count when the run completed;
   * a DisableIncomplete when it was released; undefined when its claim was lost (superseded by an
   * enable, or taken over): the request then looks again.
   */
  private settle(end: RunEnd): number | undefined {
    if (end.kind === 'completed') return this.progress.paused;
    if (end.kind === 'incomplete') {
      const remaining = end.remaining ?? estimatedRemaining(this.progress);
      throw new DisableIncomplete(this.progress.paused, remaining, end.cause, this.inProgress(remaining ?? 0));
    }
    return undefined;
  }

  /**
   * The status of a disable that goes on by itself (a 202's body), built here only: still enabled
   * while the flag is not known to be committed (the agent's row held by another transaction).
   */
  private inProgress(left: number): AgentStatusView {
    const { agentId, networkId } = this.command;
    return { agentId, networkId, enabled: !this.progress.flagged, activeUnpausedCampaignCount: left, disableInProgress: true };
  }

  /** The disable is recorded but not complete: what it paused, and what is left (counted if the database answers quickly). */
  private async incomplete(cause: RunCause): Promise<DisableIncomplete> {
    const { paused } = this.progress;
    const remaining = await this.side.clock.remainingWithin(
      () => this.side.agents.remainingCampaigns(this.command.agentId),
      estimatedRemaining(this.progress),
    );
    return new DisableIncomplete(paused, remaining, cause, this.inProgress(remaining ?? 0));
  }
}

/**
 * Enables or disables one agent of the partner's network (docs/interfaces.md §7, §9 and §10), and
 * reads its status and changes.
 *
 * Nothing here waits on anything before the statement that checks the network: a request of
 * another network never joins, waits for or counts against this network's runs, so neither its
 * latency nor its 404 tells anything about agents elsewhere.
 */
export function createAgentStatusUseCase(deps: AgentStatusDeps) {
  const { agents, runs } = deps;
  const allowance = new NetworkAllowance(deps.disablesInFlightPerNetwork);
  const side: DisableRequestSide = {
    agents,
    queue: deps.queue,
    stores: { agents, queue: deps.queue, sentPauses: deps.sentPauses },
    runs,
    clock: new AnswerClock(runs.shutdown, deps.answerMarginMs ?? 500, runs.clock),
    time: runs.clock,
    waitPollMs: deps.waitPollMs ?? 200,
  };

  /** The network's allowance: a request that joins a run going on here does not count. */
  function reserve(networkId: string, agentId: string): () => void {
    if (runs.joinable(networkId, agentId)) return () => undefined;
    const release = allowance.take(networkId, agentId);
    if (!release) throw new TooManyDisables(allowance.limit);
    return release;
  }

  async function enable(command: SetAgentStatusCommand): Promise<void> {
    // An enable made already (madeAs) answers as it did: it is never made a second time.
    if (command.madeAs !== undefined) return;
    const author = { partnerName: command.partnerName, requestId: command.requestId };
    // The enable's fence (below) is waited in full, whatever the deadline, so it must fit before the
    // deadline: the statement waits for a connection only until the deadline less the fence, and is
    // not started at all past that (a 503 with nothing changed, never a late commit answered without
    // its fence).
    const startBy = command.deadline - deps.supersedeFenceMs;
    if (runs.clock.now() >= startBy) throw new PoolWaitExceeded('enable_agent: too close to the deadline to start with its fence');
    const done = command.bulk
      ? await command.bulk.recorder.enable(command.agentId, startBy)
      : await waitingUntil(startBy, () => agents.enable(command.networkId, command.agentId, author, command.conditions));
    command.bulk?.recorded();
    if (done === 'precondition_failed') throw new PreconditionFailed();
    if (done === 'key_lost') throw new IdempotencyKeyLost();
    if (!done) throw new AgentNotInNetwork();
    // The enable's fence (docs/interfaces.md §9): a run of the disable it superseded may have had
    // its claim check answered just before this commit; no call starts on an answer older than
    // claimCheckMaxAgeMs, so once that much has passed since the commit no call of that run can
    // start any more, and only then does the enable answer: in full even past the deadline (a
    // statement that answered late), since a shorter fence would let such a call start after the 200.
    if (done.supersededDisable) await sleepUntil(runs.clock.now() + deps.supersedeFenceMs, Number.POSITIVE_INFINITY, runs.clock);
  }

  function setAgentStatus(command: SetAgentStatusCommand & { respondAsync?: undefined }): Promise<AgentStatus>;
  function setAgentStatus(command: SetAgentStatusCommand): Promise<AgentStatus | AcceptedDisable>;
  function setAgentStatus(command: SetAgentStatusCommand): Promise<AgentStatus | AcceptedDisable> {
    // Its statements wait for connections as the network's (forNetwork): another network's bulk
    // change queues its own statements behind each other, not in front of this one.
    const change = () => forNetwork(command.networkId, () => changeAs(command));
    return deps.activeNetworks ? deps.activeNetworks.during(command.networkId, change) : change();
  }

  function changeAs(command: SetAgentStatusCommand): Promise<AgentStatus | AcceptedDisable> {
    const { networkId, agentId, enabled } = command;
    return tracer.startActiveSpan('agent.set_status', async (span) => {
      span.setAttributes({ 'agent.id': agentId, 'network.id': networkId, 'agent.enabled': enabled });
      try {
        let pausedCampaignCount = 0;
        if (enabled) {
          await enable(command);
        } else {
          const release = command.bulk ? () => undefined : reserve(networkId, agentId);
          const result = await new DisableRequest(command, side).answer(release);
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

  /** The network's allowance for every disable of a bulk change at once, or none (TooManyDisables: a whole 429). */
  function reserveAll(networkId: string, agentIds: readonly string[]): Array<() => void> {
    const releases = allowance.takeAll(networkId, agentIds);
    if (!releases) throw new TooManyDisables(allowance.limit);
    return releases;
  }

  return { setAgentStatus, reserveAll, ...agentStatusReads(agents) };
}

/** What the routes of a single agent use (the bulk use case takes reserveAll besides). */
export type AgentStatusUseCase = Omit<ReturnType<typeof createAgentStatusUseCase>, 'reserveAll'>;

/** The reads: an agent's status, and its change rows a page at a time. */
function agentStatusReads(agents: AgentRepository) {
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

  return { readAgentStatus, readStatusChanges };
}
