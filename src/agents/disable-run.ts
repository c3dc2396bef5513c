// One disable run as an object: its flag, its passes over the agent's campaigns, and its end.
import { randomUUID } from 'node:crypto';
import type { Clock } from '../clock.js';
import { DependencyError } from '../observability/dependency-calls.js';
import type { AgentRepository, Lease } from '../stores/agent-repository.js';
import type { DisableQueue } from '../stores/disable-queue.js';
import type { AnsweredCall, SentBatch, SentPauses } from '../stores/sent-pauses.js';
import { ClaimCheck } from './claim-check.js';
import { type Marked, MarkQueue, type MarkSlots, type SharedMarks } from './mark-queue.js';
import type { PartOutcome, SharedCalls } from './shared-calls.js';
import type { CallOwner } from './spend-scheduler.js';

/** The stores a run pauses campaigns in, each behind its breaker; both resolve with what they confirmed. */
export interface PausePorts {
  /** Waits for a spend-management slot in `owner`'s turn; the run checks its claim inside it before it calls. */
  spendSlot(owner: CallOwner): Promise<SpendSlot>;
  markPausedInStore(campaignIds: readonly string[]): Promise<{ confirmed: string[] }>;
}

/** One spend-management slot, held until released (releasing twice releases once). */
export interface SpendSlot {
  /** The call, with the batch's idempotency key, in this slot. */
  pause(batch: SentBatch): Promise<{ confirmed: string[] }>;
  release(): void;
}

export interface RunStores {
  agents: AgentRepository;
  queue: DisableQueue;
  sentPauses: SentPauses;
}

export interface RunSettings {
  batchSize: number;
  /** Batches of one run in flight at once. */
  batchesInFlight: number;
  leaseMs: number;
  backoff: { baseMs: number; maxMs: number };
  /** The longest one batch can take (spend-management and Redis time-outs plus the database's). */
  batchBudgetMs: number;
  /** This replica, as recorded in pending_disables.lease_owner. */
  owner: string;
  /** How often a run looks again at an agent row another transaction holds. */
  flagRetryMs?: number;
  /**
   * The oldest claim-check answer a call may start on, from when the check was sent: an enable that
   * supersedes a live claim answers no earlier than this after its commit (docs/interfaces.md §9).
   */
  claimCheckMaxAgeMs: number;
}

type NotConfirmedBy = 'spend_management' | 'redis' | 'postgres';
type StopKind = 'deadline' | 'shutdown';

/** Why a run stopped before every campaign was paused. */
export type RunCause =
  | { kind: 'dependency'; error: DependencyError }
  /** A store answered about single campaigns (left out, refused, or a row locked by another transaction). */
  | { kind: 'not_confirmed'; dependency: NotConfirmedBy }
  /** The agent row stayed locked by another transaction: the flag could not be set yet. */
  | { kind: 'agent_locked' }
  /** Every pass ran without a failure, yet campaigns are left (they keep appearing or changing). */
  | { kind: 'unfinished' }
  | { kind: StopKind };

export type RunEnd =
  | { kind: 'completed'; paused: number }
  /** Released for another attempt (the worker's, or a repeated request's). */
  | { kind: 'incomplete'; paused: number; remaining: number | undefined; cause: RunCause }
  /** The claim is gone: an enable deleted the pending row (superseded), or another run took it over. */
  | { kind: 'lost_claim'; paused: number };

export interface RunRequest {
  agentId: string;
  networkId: string;
  /** The label of the key that asked (metrics only). */
  partnerName: string;
  claimToken: string;
  /** The statements to use: the request pool's or the worker's. */
  stores: RunStores;
  /** Whether agent_approved = false is known to be committed (by the request's own statement). */
  flagged: boolean;
  /** Read by the statement that claimed the row (up to DisableRunner.readAhead + 1 ids); otherwise the run reads its own. */
  firstBatch?: string[];
  /** Monotonic ms (this.side.clock.now()) by which the run stops starting batches (the request's deadline). */
  stopAt: number;
  /** The worker's run: its calls take only the capacity requests leave free. */
  background?: boolean;
  /** Called with each batch's count as it is moved, so that a request answering early knows its count. */
  onPaused?: (moved: number) => void;
  /** Called once agent_approved = false is committed by the run (it was not by the request). */
  onFlagged?: () => void;
  /** A bulk change's shared calls (docs/interfaces.md §16): the run's batches go into calls shared with its other agents. */
  shared?: SharedCalls;
  /** A bulk change's shared marks: the run's marks go into statements shared with its other agents. */
  sharedMarks?: SharedMarks;
}

/** What a run takes from the runner of its replica. */
export interface RunnerSide {
  ports: PausePorts;
  settings: RunSettings;
  lease: Lease;
  /** Campaigns one read fetches (DisableRunner.readAhead). */
  readAhead: number;
  /** The clock of the flag's retries, the claim check's age and its lease renewal. */
  clock: Clock;
  markSlots: MarkSlots;
  /** Whether a batch started now could not end before `stopAt` or the replica's shutdown. */
  stopReason: (stopAt: number) => StopKind | undefined;
  /** Campaigns moved to paused in the database (metrics, and the request's count). */
  countPaused: (moved: number) => void;
  /** Campaigns a store answered about without confirming them (metrics). */
  countNotConfirmed: (dependency: NotConfirmedBy, count: number) => void;
  /**
   * A recorded call known to have paused nothing (not sent after all, or answered with a failure):
   * its record is deleted, tried again until the database answers (DisableRunner's UnsentCalls).
   */
  forgetCall: (sentPauses: SentPauses, callKey: string) => void;
}

/** Why a run stops starting batches, the first of each kind; all of them name its end. */
class Stops {
  failure: DependencyError | undefined;
  claimLost = false;
  stopped: StopKind | 'agent_locked' | undefined;
  /** The first store that answered without confirming every campaign: the run goes on, then ends incomplete. */
  notConfirmed: NotConfirmedBy | undefined;

  fail(error: unknown): void {
    this.failure ??= toDependencyError(error);
  }

  /** No batch may start any more. */
  get halted(): boolean {
    return this.failure !== undefined || this.claimLost || this.stopped !== undefined;
  }

  cause(): RunCause {
    if (this.failure) return { kind: 'dependency', error: this.failure };
    if (this.stopped) return { kind: this.stopped };
    if (this.notConfirmed) return { kind: 'not_confirmed', dependency: this.notConfirmed };
    return { kind: 'unfinished' };
  }
}

const defaultFlagRetryMs = 200;

/**
 * One disable run: the claim a request, a take-over or the worker holds, driven to its end.
 * 1. The flag: agent_approved = false is committed before any campaign is read for pausing.
 * 2. Passes over the agent's unpaused campaigns, read a chunk ahead and cut into batches; each
 *    batch waits for a spend-management slot, its claim is checked inside it (ClaimCheck), then it is
 *    paused in spend management, Redis and the database (MarkQueue), in that order.
 * 3. The end: completed (the pending row is deleted), the claim lost, or released for another
 *    attempt, with what spend management confirmed and the run could not settle handed over.
 */
export class DisableRun {
  private paused = 0;
  /** The last batch's mark found nothing left and deleted the pending row. */
  private finishedByMark = false;
  private readonly stops = new Stops();
  /** By call: campaigns its 200 named that are not marked in the database yet (their record has the call). */
  private readonly unsettled = new Map<string, string[]>();
  private readonly batchesInFlight = new Set<Promise<void>>();
  /** Each batch's mark, until its outcome is taken into the run. */
  private readonly marksInFlight = new Set<Promise<void>>();
  /** The campaigns the claiming statement read, for the first read of the first pass. */
  private firstChunk: string[] | undefined;
  private readonly owner: CallOwner;
  private readonly marks: MarkQueue;
  private claims: ClaimCheck | undefined;

  constructor(
    private readonly request: RunRequest,
    private readonly side: RunnerSide,
  ) {
    this.firstChunk = request.firstBatch;
    this.owner = { networkId: request.networkId, agentId: request.agentId, background: request.background === true };
    const { agentId, networkId, sharedMarks } = request;
    const claim = side.lease;
    this.marks = new MarkQueue(
      sharedMarks
        ? (mark) => sharedMarks.mark({ ...mark, agentId, claim })
        : (mark) =>
            side.markSlots.run(networkId, () =>
              request.stores.agents.markPaused(agentId, mark.campaignIds, claim, mark.finish, mark.settledCalls),
            ),
      (marked, sentAt) => this.marked(marked, sentAt),
      side.clock,
    );
  }

  async drive(): Promise<RunEnd> {
    if (!this.request.flagged) await this.setFlag();
    this.claims = new ClaimCheck(
      this.request.stores.queue,
      this.request.agentId,
      this.side.lease,
      {
        claimLost: () => {
          this.stops.claimLost = true;
        },
        failed: (error) => this.stops.fail(error),
      },
      this.side.clock,
    );
    const completed = this.stops.halted ? undefined : await this.passes();
    return completed ?? (await this.release());
  }

  /** When the request's statement could not set the flag: sets it as soon as the agent row is free. */
  private async setFlag(): Promise<void> {
    const { agentId, claimToken, stopAt } = this.request;
    const retryMs = this.side.settings.flagRetryMs ?? defaultFlagRetryMs;
    // The worker gives up after half a lease (and tries again after its backoff); a request waits
    // until its own stop time.
    const waitUntil = Math.min(stopAt, this.side.clock.now() + this.side.settings.leaseMs / 2);
    try {
      for (;;) {
        const flag = await this.request.stores.queue.setFlag(agentId, claimToken);
        if (!flag.held) {
          this.stops.claimLost = true;
          return;
        }
        if (flag.flagged) {
          this.request.onFlagged?.();
          return;
        }
        const stop = this.side.stopReason(Number.POSITIVE_INFINITY);
        if (stop || this.side.clock.now() + retryMs > waitUntil) {
          this.stops.stopped = stop ?? 'agent_locked';
          return;
        }
        await this.side.clock.sleep(retryMs);
      }
    } catch (error) {
      this.stops.fail(error);
    }
  }

  /**
   * Two passes at most: a campaign committed while the flag statement waited for it (the
   * restriction trigger makes them wait for each other) can sort before the first pass's cursor.
   * Resolves with the run's end when it completed, else undefined.
   */
  private async passes(): Promise<RunEnd | undefined> {
    const { agentId, claimToken } = this.request;
    for (let pass = 0; pass < 2; pass += 1) {
      await this.pass();
      if (this.finishedByMark) return { kind: 'completed', paused: this.paused };
      if (this.stops.claimLost || this.stops.failure || this.stops.notConfirmed) return undefined;
      // Stopped by a deadline or a shutdown right after the last batch: the finishing statement
      // (it deletes the row only when nothing is left) tells whether the run is in fact complete.
      try {
        if (await this.request.stores.queue.finish(agentId, claimToken)) return { kind: 'completed', paused: this.paused };
      } catch (error) {
        this.stops.fail(error);
        return undefined;
      }
      if (this.stops.stopped) return undefined;
    }
    return undefined;
  }

  /**
   * One pass from the first campaign. Campaigns are read a chunk at a time (the batches one run may
   * have in flight, plus one id that tells whether more follow), then cut into batches: one read
   * serves up to `batchesInFlight` calls, so reads never starve the pipeline nor crowd the pool.
   */
  private async pass(): Promise<void> {
    const { batchSize, batchesInFlight } = this.side.settings;
    const chunkSize = this.side.readAhead;
    let cursor: string | null = null;
    const batches: string[][] = [];
    // Set when a read returned no more than asked for: no statement is needed to find that out.
    let exhausted = false;
    try {
      for (;;) {
        while (this.batchesInFlight.size >= batchesInFlight) await Promise.race(this.batchesInFlight);
        if (this.stops.halted) break;
        const stop = this.side.stopReason(this.request.stopAt);
        if (stop) {
          this.stops.stopped = stop;
          break;
        }
        if (batches.length === 0) {
          if (exhausted) break;
          let ids: string[] = this.firstChunk ?? (await this.request.stores.agents.nextBatch(this.request.agentId, cursor, chunkSize + 1));
          this.firstChunk = undefined;
          exhausted = ids.length <= chunkSize;
          if (!exhausted) ids = ids.slice(0, chunkSize);
          if (ids.length === 0) break;
          cursor = ids.at(-1)!;
          for (let at = 0; at < ids.length; at += batchSize) batches.push(ids.slice(at, at + batchSize));
        }
        this.startBatch(batches.shift()!, exhausted && batches.length === 0);
      }
    } catch (error) {
      this.stops.fail(error);
    } finally {
      await Promise.allSettled([...this.batchesInFlight]);
      await Promise.allSettled([...this.marksInFlight]);
    }
  }

  private startBatch(ids: string[], last: boolean): void {
    const running: Promise<void> = this.batch(ids, last)
      .catch((error: unknown) => this.stops.fail(error))
      .finally(() => this.batchesInFlight.delete(running));
    this.batchesInFlight.add(running);
  }

  /** One batch: spend management (inside its slot, after the claim check), then Redis, then its mark. */
  private async batch(ids: string[], last: boolean): Promise<void> {
    const { sentPauses } = this.request.stores;
    const batch: SentBatch = { campaignIds: ids, callKey: randomUUID() };
    const recorded = { value: false };
    let spend: { confirmed: string[] } | undefined;
    let sharedStore: PartOutcome['stored'] | undefined;
    try {
      if (this.request.shared) {
        const outcome = await this.sharedCall(this.request.shared, batch, recorded);
        spend = outcome;
        sharedStore = outcome?.stored;
      } else {
        // The slot first, then the claim check (which records the call in the write-ahead record)
        // inside it; only when that says yes is the call sent. undefined: it was not sent.
        const slot = await this.side.ports.spendSlot(this.owner);
        try {
          spend = (await this.mayStart(batch, recorded)) ? await slot.pause(batch) : undefined;
        } finally {
          slot.release();
        }
      }
    } catch (error) {
      this.stops.fail(error);
      // Answered with a failure, or never sent (an open breaker, a refused connection): it paused
      // nothing, and is never sent again. A call whose answer never came (a time-out, a cut
      // connection) keeps its record, in doubt: sent again as itself once its lease runs out.
      if (recorded.value && !answerNeverCame(error)) this.side.forgetCall(sentPauses, batch.callKey);
      return;
    }
    if (!spend) {
      // Recorded, then not sent after all (a late answer, a stop): it paused nothing.
      if (recorded.value) this.side.forgetCall(sentPauses, batch.callKey);
      return;
    }
    if (spend.confirmed.length < ids.length) this.notConfirmedBy('spend_management', ids.length - spend.confirmed.length);
    if (spend.confirmed.length === 0) {
      this.side.forgetCall(sentPauses, batch.callKey);
      return;
    }
    const confirmed = spend.confirmed;
    this.unsettled.set(batch.callKey, confirmed);
    const stored = await (sharedStore ?? this.side.ports.markPausedInStore(confirmed));
    if (stored.confirmed.length < confirmed.length) this.notConfirmedBy('redis', confirmed.length - stored.confirmed.length);
    if (stored.confirmed.length === 0) return;
    // The batch read as the run's last, all confirmed: its statement may finish the run too.
    const finish = last && !this.stops.notConfirmed && stored.confirmed.length === ids.length;
    // Every campaign the call paused is marked by this statement: it deletes the call's record too.
    const whole = stored.confirmed.length === confirmed.length;
    // The database step does not hold the batch's place in the pipeline: the next call may start
    // while the marks, one statement at a time, catch up.
    const settled = this.marks.mark(stored.confirmed, finish, whole ? batch.callKey : undefined).then(
      (skipped) => {
        if (whole && skipped.length === 0) this.unsettled.delete(batch.callKey);
        else {
          const done = new Set(stored.confirmed.filter((id) => !skipped.includes(id)));
          this.unsettled.set(
            batch.callKey,
            confirmed.filter((id) => !done.has(id)),
          );
        }
        if (skipped.length > 0) this.notConfirmedBy('postgres', skipped.length);
      },
      (error: unknown) => this.stops.fail(error),
    );
    this.marksInFlight.add(settled);
    void settled.finally(() => this.marksInFlight.delete(settled));
  }

  /** The batch as its part of a call shared with the bulk change's other agents (src/agents/shared-calls.ts). */
  private sharedCall(shared: SharedCalls, batch: SentBatch, recorded: { value: boolean }): Promise<PartOutcome | undefined> {
    return shared.pause({
      agentId: this.request.agentId,
      lease: this.side.lease,
      batch,
      claims: this.claims!,
      mayJoin: () => {
        if (this.stops.claimLost || this.stops.failure) return false;
        const stop = this.side.stopReason(this.request.stopAt);
        if (stop) this.stops.stopped ??= stop;
        return stop === undefined;
      },
      recorded: () => {
        recorded.value = true;
      },
    });
  }

  /**
   * Whether the batch's call may start now (asked inside its slot); `recorded` is set once its
   * check has recorded it. A batch whose claim is gone, whose check answered later than
   * `claimCheckMaxAgeMs` after it was sent, or whose stop time has come is not sent.
   */
  private async mayStart(batch: SentBatch, recorded: { value: boolean }): Promise<boolean> {
    if (this.stops.claimLost || this.stops.failure) return false;
    const stop = this.side.stopReason(this.request.stopAt);
    if (stop) {
      this.stops.stopped ??= stop;
      return false;
    }
    const answer = await this.claims!.check(batch);
    // A check that failed (a time-out, a lost answer) may have recorded the batch: its record is
    // forgotten like one that holds, so that no call that was never sent is sent later.
    recorded.value = answer.ours || answer.unknown === true;
    // A call the check allowed is sent even when another batch of the run failed meanwhile (no
    // further batch starts): a call recorded and then not sent leaves a record to delete, and a
    // replica killed before it is deleted leaves it to read as a call in doubt.
    if (!answer.ours) return false;
    // An answer older than the bound is not trusted: an enable may have answered since its
    // snapshot (it waits that long after its commit before answering).
    if (this.side.clock.now() - answer.sentAt > this.side.settings.claimCheckMaxAgeMs) {
      this.stops.fail(new DependencyError('postgres', 'timeout', 'check_claim: answered too late to start a call'));
      return false;
    }
    return true;
  }

  private marked(marked: Marked, sentAt: number): void {
    this.claims?.renewedBy(sentAt); // the statement renewed the lease (when the claim is ours)
    this.side.countPaused(marked.moved);
    this.paused += marked.moved;
    if (marked.finished) this.finishedByMark = true;
  }

  private notConfirmedBy(dependency: NotConfirmedBy, count: number): void {
    this.stops.notConfirmed ??= dependency;
    this.side.countNotConfirmed(dependency, count);
  }

  /** The run did not complete: gives the claim back (unless it is lost) and hands over what it could not settle. */
  private async release(): Promise<RunEnd> {
    const { agentId, claimToken, stores } = this.request;
    const cause = this.stops.cause();
    if (!this.stops.claimLost) {
      // Stopped by a deadline or a shutdown: due at once, for the worker of any replica. After a
      // failure: due after a capped exponential backoff. If this write fails, the lease runs out
      // by itself and the row becomes due all the same.
      const now = cause.kind === 'deadline' || cause.kind === 'shutdown';
      const stillOurs = await stores.queue
        .release(agentId, claimToken, now ? 'now' : { backoff: this.side.settings.backoff }, now ? null : describeCause(cause))
        .catch(() => true);
      if (!stillOurs) this.stops.claimLost = true;
    }
    // Paused in spend management, not yet everywhere: their calls' records have them; handed to the
    // worker of any replica at once, as answered (if this write fails, their lease runs out all the
    // same and the calls are sent again as themselves, which settles them just as well).
    if (this.unsettled.size > 0) {
      const answered: AnsweredCall[] = [...this.unsettled].map(([callKey, unsettled]) => ({ callKey, unsettled }));
      await stores.sentPauses.handOver(answered).catch(() => undefined);
    }
    if (this.stops.claimLost) return { kind: 'lost_claim', paused: this.paused };
    const remaining = await stores.agents.remainingCampaigns(agentId).catch(() => undefined);
    return { kind: 'incomplete', paused: this.paused, remaining, cause };
  }
}

/** `<dependency>:<error class>` (as kept in pending_disables.last_error), or the stop reason. */
export function describeCause(cause: RunCause): string {
  switch (cause.kind) {
    case 'dependency':
      return cause.error.summary;
    case 'not_confirmed':
      return `${cause.dependency}:not_confirmed`;
    case 'agent_locked':
      return 'postgres:agent_locked';
    default:
      return cause.kind;
  }
}

/**
 * Whether a failed pause call may have reached spend management and its answer never came back (a
 * time-out, a cut connection): only such a call is in doubt. A status answered (any but 200), an
 * open breaker or a refused connection paused nothing.
 */
function answerNeverCame(error: unknown): boolean {
  if (!(error instanceof DependencyError)) return true;
  if (error.status !== undefined || error.reason === 'breaker_open' || error.reason === 'busy') return false;
  return !(error.reason === 'unavailable' && error.message.endsWith('ECONNREFUSED'));
}

export function toDependencyError(error: unknown): DependencyError {
  return error instanceof DependencyError ? error : new DependencyError('postgres', 'error', (error as Error).name ?? 'error');
}
