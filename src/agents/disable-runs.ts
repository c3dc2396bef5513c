// The replica's runner: its runs' registry and shutdown; every disable run passes DisableRunner.run, where its end is reported.
import { randomUUID } from 'node:crypto';
import { type Clock, systemClock } from '../clock.js';
import type { Metrics } from '../observability/metrics.js';
import type { AgentBatchStatements } from '../stores/agent-batches.js';
import type { AgentRepository, Lease } from '../stores/agent-repository.js';
import type { AnsweredCall, RecordedCall, RecordedClaim, SentPauses } from '../stores/sent-pauses.js';
import {
  DisableRun,
  type PausePorts,
  type RunEnd,
  type RunRequest,
  type RunSettings,
  type RunStores,
  toDependencyError,
} from './disable-run.js';
import { MarkSlots, SharedMarks } from './mark-queue.js';
import type { CallOwner } from './spend-scheduler.js';

/** The spend-management API takes 1 to 100 ids a call (docs/interfaces.md §6). */
export const maxBatchSize = 100;

/** The replica's shutdown, as runs and requests see it. */
class Shutdown {
  private at = Number.POSITIVE_INFINITY;
  private readonly controller = new AbortController();

  /** Monotonic ms (the runner's clock) by which every run stops starting batches (infinite until a shutdown). */
  get stopTime(): number {
    return this.at;
  }

  /** Aborted when the replica starts shutting down; `stopTime` then says by when requests answer. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  stopBy(at: number): void {
    this.at = Math.min(this.at, at);
    this.controller.abort();
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * This replica's recorded calls known to have paused nothing (not sent after all, or answered with
 * a failure) whose record is not deleted yet. The deletion is tried again (100 ms doubling to 1 s,
 * with jitter: well within the record's lease, after which another replica would take the record
 * for a call in doubt) until the database answers (a statement that hung or failed leaves the record in place, and a
 * record left in place reads as a call in doubt): so the record of a call that was never sent does
 * not outlive the run's knowledge of it. Until it is deleted, this replica's worker never sends
 * such a call (it deletes the record instead). Only a replica that dies before the deletion leaves
 * such a record behind (docs/interfaces.md §9, what "in doubt" means).
 */
class UnsentCalls {
  private readonly keys = new Map<string, SentPauses>();
  private draining: Promise<void> | undefined;

  private static readonly retryBaseMs = 100;
  private static readonly retryMaxMs = 1_000;

  constructor(private readonly stopped: AbortSignal) {}

  has(callKey: string): boolean {
    return this.keys.has(callKey);
  }

  /** Resolves once no deletion is under way (at a shutdown, before the pools close; bounded by the replica's own shutdown time-out). */
  async drained(): Promise<void> {
    while (this.draining) await this.draining;
  }

  add(sentPauses: SentPauses, callKey: string): void {
    this.keys.set(callKey, sentPauses);
    this.start();
  }

  private start(): void {
    this.draining ??= this.drain().finally(() => {
      this.draining = undefined;
      if (this.keys.size > 0 && !this.stopped.aborted) this.start();
    });
  }

  private async drain(): Promise<void> {
    for (let attempt = 0; this.keys.size > 0; attempt += 1) {
      const byStore = new Map<SentPauses, string[]>();
      for (const [key, store] of this.keys) byStore.set(store, [...(byStore.get(store) ?? []), key]);
      let failed = false;
      for (const [store, keys] of byStore) {
        try {
          await store.forget(keys);
          for (const key of keys) this.keys.delete(key);
        } catch {
          failed = true;
        }
      }
      if (!failed) attempt = 0;
      else if (this.stopped.aborted) return;
      else await sleep(Math.min(UnsentCalls.retryMaxMs, UnsentCalls.retryBaseMs * 2 ** Math.min(attempt, 10)) * (0.5 + Math.random() / 2));
    }
  }
}

/** How a run's end counts in the worker's metrics and logs (disable_worker_attempts_total's outcome). */
export type RunOutcome = 'completed' | 'incomplete' | 'failed' | 'superseded' | 'stopped';

export function runOutcome(end: RunEnd): RunOutcome {
  if (end.kind === 'completed') return 'completed';
  if (end.kind === 'lost_claim') return 'superseded';
  if (end.cause.kind === 'shutdown' || end.cause.kind === 'deadline') return 'stopped';
  return end.cause.kind === 'dependency' ? 'failed' : 'incomplete';
}

interface ActiveRun {
  networkId: string;
  done: Promise<RunEnd>;
}

/**
 * The replica's disable runs (one run is a DisableRun, src/agents/disable-run.ts): the registry of
 * the runs going on here (so that a repeated request joins a run instead of repeating its calls),
 * the shutdown that stops them between batches, the batch statements' slots they share, and the
 * background settling of calls no run settles (settleRecorded). The campaign metrics are recorded
 * here, so the worker's pauses count like a request's.
 *
 * What a run sent is settled whatever becomes of the run: a batch that spend management confirmed
 * and that the run could not settle (Redis or the database failed, the claim was lost) is handed to
 * the worker of any replica through its record, at once; a call whose outcome the run never learnt
 * (it failed or the process died) is found by its record once the record's lease runs out, and sent
 * again with the same idempotency key.
 */
export class DisableRunner {
  private readonly runs = new Map<string, ActiveRun>();
  readonly shutdown = new Shutdown();
  private readonly markSlots = new MarkSlots();
  private readonly unsent: UnsentCalls;

  constructor(
    private readonly ports: PausePorts,
    private readonly settings: RunSettings,
    private readonly metrics: Metrics,
    /** The runs' clock (stop times, claim-check ages, leases): the process's, or a test's. */
    readonly clock: Clock = systemClock,
  ) {
    this.unsent = new UnsentCalls(this.shutdown.signal);
  }

  /**
   * Campaigns one read fetches: what one run may have in flight. The statement that records and
   * claims a disable reads one more, and so does each read of a run: the extra id tells whether
   * more follow, without another statement.
   */
  get readAhead(): number {
    return this.settings.batchSize * this.settings.batchesInFlight;
  }

  /** The end of this network's run of the agent going on in this replica, if any: a request joins it. */
  joinable(networkId: string, agentId: string): Promise<RunEnd> | undefined {
    const run = this.runs.get(agentId);
    return run && run.networkId === networkId ? run.done : undefined;
  }

  /** Shared marks for one bulk change of the network (docs/interfaces.md §16), in this replica's mark slots. */
  sharedMarks(
    networkId: string,
    batches: Pick<AgentBatchStatements, 'markPausedMany'>,
    agents: Pick<AgentRepository, 'markPaused'>,
  ): SharedMarks {
    return new SharedMarks(batches, agents, networkId, this.markSlots);
  }

  /** A lease for a new claim of this replica. */
  newLease(): Lease {
    return this.lease(randomUUID());
  }

  /** Shutdown: every run stops between batches once it could not finish one more by `at`. */
  stopBy(at: number): void {
    this.shutdown.stopBy(at);
  }

  /** Resolves once no run is going on. */
  async idle(): Promise<void> {
    while (this.runs.size > 0) await Promise.allSettled([...this.runs.values()].map((run) => run.done));
    // The records of calls known not to have been sent are deleted before the pools close.
    await this.unsent.drained();
  }

  /**
   * Drives one claim to its end. Every disable run passes here, whoever holds the claim: a request,
   * a request that took over a run its holder gave up, and the convergence worker. So this is the
   * in-process place to observe every run's end, and the one place it is reported: the RunEnd this
   * resolves with says completed, lost_claim (superseded by an enable, or taken over) or
   * incomplete (released, with its cause). The request's answer (set-agent-status.ts) and the
   * worker's metrics and log (runOutcome) read it from here, and nowhere else.
   *
   * The disable's completion event is not written here: the store statement that deletes the
   * pending row (the last batch's mark, or queue.finish) writes it in the same transaction, so it
   * is written exactly once whichever run, replica or attempt completes the disable.
   */
  run(request: RunRequest): Promise<RunEnd> {
    const done = new DisableRun(request, {
      ports: this.ports,
      settings: this.settings,
      lease: this.lease(request.claimToken),
      readAhead: this.readAhead,
      clock: this.clock,
      markSlots: this.markSlots,
      stopReason: (stopAt) => this.stopReason(stopAt),
      countPaused: (moved) => this.count(request.partnerName, moved, request),
      countNotConfirmed: (dependency, count) => this.metrics.campaignsNotConfirmed.inc({ dependency }, count),
      forgetCall: (sentPauses, callKey) => this.unsent.add(sentPauses, callKey),
    }).drive();
    const entry: ActiveRun = { networkId: request.networkId, done };
    this.runs.set(request.agentId, entry);
    void done.finally(() => {
      if (this.runs.get(request.agentId) === entry) this.runs.delete(request.agentId);
    });
    return done;
  }

  private lease(claimToken: string): Lease {
    return { claimToken, owner: this.settings.owner, leaseMs: this.settings.leaseMs };
  }

  private stopReason(stopAt: number): 'deadline' | 'shutdown' | undefined {
    const end = this.clock.now() + this.settings.batchBudgetMs;
    if (end > this.shutdown.stopTime) return 'shutdown';
    if (end > stopAt) return 'deadline';
    return undefined;
  }

  private count(partnerName: string, moved: number, request: Pick<RunRequest, 'onPaused'>): void {
    if (moved === 0) return;
    this.metrics.campaignsPaused.inc({ partner: partnerName }, moved);
    request.onPaused?.(moved);
  }

  /**
   * Settles recorded pause calls that nobody settles (claimed by the worker from the call record):
   * a call in doubt (its answer never came) is sent again exactly as it was first sent, with its own
   * idempotency key and its own campaigns (the same call, completed: not a new one, so an enable
   * does not stop it); a call answered 200 is not sent again. What spend management confirmed is then
   * paused in Redis and marked in the database, which deletes the record. A repeat answered with a
   * failure leaves the call in doubt (its first send may still have paused). What is left is given
   * back with a backoff. Resolves with the campaigns settled.
   */
  async settleRecorded(claim: RecordedClaim, stores: Pick<RunStores, 'agents' | 'sentPauses'>): Promise<number> {
    const nil = this.lease('00000000-0000-0000-0000-000000000000');
    const answered: AnsweredCall[] = [];
    let lastError: string | null = null;
    const settleCall = async (call: RecordedCall): Promise<number> => {
      if (this.unsent.has(call.callKey)) {
        // Known here never to have been sent (its deletion is still being tried): not sent now either.
        await stores.sentPauses.forget([call.callKey]);
        return 0;
      }
      let confirmed = call.answered;
      if (confirmed === undefined) {
        const owner: CallOwner = { networkId: '', agentId: call.agentId, background: true };
        // A part of a shared call is repeated as the whole call it was sent in; only its own campaigns are its to settle.
        const sent = call.sentAs ?? { campaignIds: call.campaignIds, callKey: call.callKey };
        const slot = await this.ports.spendSlot(owner);
        const again = await slot.pause(sent).finally(() => slot.release());
        const own = new Set(call.campaignIds);
        confirmed = again.confirmed.filter((id) => own.has(id));
        if (confirmed.length === 0) {
          await stores.sentPauses.forget([call.callKey]);
          return 0;
        }
        answered.push({ callKey: call.callKey, unsettled: confirmed });
      }
      const stored = await this.ports.markPausedInStore(confirmed);
      if (stored.confirmed.length === 0) return 0;
      const whole = stored.confirmed.length === confirmed.length;
      const marked = await stores.agents.markPaused(call.agentId, stored.confirmed, nil, false, whole ? [call.callKey] : []);
      this.count(call.partnerName, marked.moved, {});
      return stored.confirmed.length - marked.skipped.length;
    };
    const results = await Promise.allSettled(claim.calls.map(settleCall));
    let settled = 0;
    for (const result of results) {
      if (result.status === 'fulfilled') settled += result.value;
      else lastError = toDependencyError(result.reason).summary;
    }
    // Records still there (refused by Redis, a locked row, a failure) wait for their backoff.
    await stores.sentPauses.release(claim.claimToken, answered, this.settings.backoff, lastError);
    return settled;
  }
}
