import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { DependencyError } from '../observability/dependency-calls.js';
import type { Metrics } from '../observability/metrics.js';
import type { AgentRepository, Lease } from '../stores/database.js';
import type { DisableQueue } from '../stores/disable-queue.js';
import type { RecordedCall, RecordedClaim, SentBatch, SentPauses } from '../stores/sent-pauses.js';
import type { CallOwner } from './spend-scheduler.js';

/** The spend-management API takes 1 to 100 ids a call (docs/interfaces.md §6). */
export const maxBatchSize = 100;

/** Batch statements one network's runs have in flight at once in a replica (see withMarkSlot). */
const marksPerNetwork = 2;

/** The stores a run pauses campaigns in, each behind its breaker; both resolve with what they confirmed. */
export interface PausePorts {
  /**
   * Waits for a spend-management slot, then asks `mayStart` (the claim check, which records the
   * call in the write-ahead record) inside it, and only when that says yes sends the call with the
   * batch's idempotency key. undefined: the call was not sent.
   */
  pauseSpending: (batch: SentBatch, mayStart: () => Promise<boolean>, owner: CallOwner) => Promise<{ confirmed: string[] } | undefined>;
  markPausedInStore: (campaignIds: readonly string[]) => Promise<{ confirmed: string[] }>;
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

/** Why a run stopped before every campaign was paused. */
export type RunCause =
  | { kind: 'dependency'; error: DependencyError }
  /** A store answered about single campaigns (left out, refused, or a row locked by another transaction). */
  | { kind: 'not_confirmed'; dependency: NotConfirmedBy }
  /** The agent row stayed locked by another transaction: the flag could not be set yet. */
  | { kind: 'agent_locked' }
  /** Every pass ran without a failure, yet campaigns are left (they keep appearing or changing). */
  | { kind: 'unfinished' }
  | { kind: 'deadline' }
  | { kind: 'shutdown' };

export type RunEnd =
  | { kind: 'completed'; paused: number }
  /** Released for another attempt (the worker's, or a repeated request's). */
  | { kind: 'incomplete'; paused: number; remaining: number | undefined; cause: RunCause }
  /** The claim is gone: an enable deleted the pending row, or another run took it over. */
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
  /** Read by the statement that claimed the row (up to readAheadSize + 1 ids); otherwise the run reads its own. */
  firstBatch?: string[];
  /** Monotonic ms (performance.now()) by which the run stops starting batches (the request's deadline). */
  stopAt: number;
  /** The worker's run: its calls take only the capacity requests leave free. */
  background?: boolean;
  /** Called with each batch's count as it is moved, so that a request answering early knows its count. */
  onPaused?: (moved: number) => void;
  /** Called once agent_approved = false is committed by the run (it was not by the request). */
  onFlagged?: () => void;
}

interface ActiveRun {
  networkId: string;
  done: Promise<RunEnd>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The disable protocol's driver: the one pipeline that a request, a take-over and the convergence
 * worker all run, and the registry of the runs going on in this replica (so that a repeated
 * request joins a run instead of repeating its calls). One drive returns one RunEnd; the campaign
 * metrics are recorded here, so the worker's pauses count like a request's.
 *
 * 1. The flag: agent_approved = false is committed before any campaign is read for pausing. When
 *    the request's own statement could not set it (another transaction held the agent row), the
 *    run sets it first, fenced by its claim, as soon as the row is free.
 * 2. Batches are read ahead (up to `batchesInFlight`), then each waits for a spend-management slot
 *    (the replica's fair scheduler, src/agents/spend-scheduler.ts); inside the slot, right before
 *    the call, one statement checks the claim (renewing the lease when a third of it is gone) and,
 *    only when it holds, records the call in the write-ahead record (sent_pauses). A batch whose
 *    claim is gone (an enable answered, or another replica took over), whose check answered later
 *    than `claimCheckMaxAgeMs` after it was sent, or whose stop time has come is not sent.
 * 3. Per batch the order is spend management, then Redis, then the database (the commit point), so
 *    a campaign paused in the database is paused everywhere at every moment. The database statement
 *    (one in flight per run, marking every batch confirmed meanwhile) renews the lease too: only
 *    progress keeps a claim. It also deletes the batch's record.
 * 4. What a run sent is settled whatever becomes of the run: a batch that spend management
 *    confirmed and that the run could not settle (Redis or the database failed, the claim was lost)
 *    is handed to the worker of any replica through its record, at once; a call whose outcome the
 *    run never learnt (it failed or the process died) is found by its record once the record's
 *    lease runs out, and sent again with the same idempotency key (settleRecorded).
 */
export class DisableRunner {
  private readonly runs = new Map<string, ActiveRun>();
  private stopAllAt = Number.POSITIVE_INFINITY;
  private readonly shutdown = new AbortController();
  /** Batch statements (marks) in flight by network: at most `marksPerNetwork` each. */
  private readonly marking = new Map<string, { active: number; waiting: Array<() => void> }>();

  constructor(
    private readonly ports: PausePorts,
    private readonly settings: RunSettings,
    private readonly metrics: Metrics,
  ) {}

  /** The run of this agent going on in this replica, if any. */
  active(agentId: string): Readonly<ActiveRun> | undefined {
    return this.runs.get(agentId);
  }

  lease(claimToken: string): Lease {
    return { claimToken, owner: this.settings.owner, leaseMs: this.settings.leaseMs };
  }

  /** Aborted when the replica starts shutting down; `stopTime` then says by when requests answer. */
  get shutdownSignal(): AbortSignal {
    return this.shutdown.signal;
  }

  /** Monotonic ms (performance.now()) by which every run stops starting batches (infinite until a shutdown). */
  get stopTime(): number {
    return this.stopAllAt;
  }

  /** Shutdown: every run stops between batches once it could not finish one more by `at`. */
  stopBy(at: number): void {
    this.stopAllAt = Math.min(this.stopAllAt, at);
    this.shutdown.abort();
  }

  /** Resolves once no run is going on. */
  async idle(): Promise<void> {
    while (this.runs.size > 0) await Promise.allSettled([...this.runs.values()].map((run) => run.done));
  }

  run(request: RunRequest): Promise<RunEnd> {
    const done = this.execute(request);
    const entry: ActiveRun = { networkId: request.networkId, done };
    this.runs.set(request.agentId, entry);
    void done.finally(() => {
      if (this.runs.get(request.agentId) === entry) this.runs.delete(request.agentId);
    });
    return done;
  }

  private stopReason(stopAt: number): 'deadline' | 'shutdown' | undefined {
    const end = performance.now() + this.settings.batchBudgetMs;
    if (end > this.stopAllAt) return 'shutdown';
    if (end > stopAt) return 'deadline';
    return undefined;
  }

  private async execute(request: RunRequest): Promise<RunEnd> {
    const { agentId, claimToken, partnerName } = request;
    const { agents, queue, sentPauses } = request.stores;
    const { batchSize, batchesInFlight, leaseMs } = this.settings;
    const lease = this.lease(claimToken);
    let paused = 0;
    let failure: DependencyError | undefined;
    let notConfirmed: NotConfirmedBy | undefined;
    let lostClaim = false;
    let stopped: 'deadline' | 'shutdown' | 'agent_locked' | undefined;
    let finishedByMark = false;
    /** Confirmed by spend management, not yet marked in the database (their record says so too). */
    const unsettled = new Set<string>();

    const notConfirmedBy = (dependency: NotConfirmedBy, count: number) => {
      notConfirmed ??= dependency;
      this.metrics.campaignsNotConfirmed.inc({ dependency }, count);
    };

    // 1. The flag, when the request's statement could not set it.
    if (!request.flagged) {
      // The worker gives up after half a lease (and tries again after its backoff); a request waits
      // until its own stop time.
      const waitUntil = Math.min(request.stopAt, performance.now() + leaseMs / 2);
      try {
        for (;;) {
          const flag = await queue.setFlag(agentId, claimToken);
          if (!flag.held) {
            lostClaim = true;
            break;
          }
          if (flag.flagged) {
            request.onFlagged?.();
            break;
          }
          const stop = this.stopReason(Number.POSITIVE_INFINITY);
          if (stop || performance.now() + (this.settings.flagRetryMs ?? 200) > waitUntil) {
            stopped = stop ?? 'agent_locked';
            break;
          }
          await sleep(this.settings.flagRetryMs ?? 200);
        }
      } catch (error) {
        failure = toDependencyError(error);
      }
    }

    // 2. The claim check, inside the spend-management slot. It records the calls it allows in the
    // write-ahead record (sent_pauses) in the same statement. Calls that get their slots while a
    // check is under way wait for the next one, started after they asked, which records them all:
    // every call is covered by a check begun once its slot was granted, and one run never has more
    // than one check in flight. Local durations are measured on the monotonic clock.
    // When the lease was set or renewed (the claiming statement set it just before the run).
    let renewedAt = performance.now();
    /** `unknown`: the statement failed, and may have committed its record all the same. */
    type CheckAnswer = { held: boolean; sentAt: number; unknown?: true };
    const checkOnce = async (batches: SentBatch[]): Promise<CheckAnswer> => {
      const sentAt = performance.now();
      // A fresh lease is only checked; one a third gone is renewed too.
      const renew = sentAt - renewedAt > leaseMs / 3;
      try {
        const held = await queue.checkClaim(agentId, lease, renew, batches);
        if (held && renew) renewedAt = sentAt;
        if (!held) lostClaim = true;
        return { held, sentAt };
      } catch (error) {
        failure ??= toDependencyError(error);
        return { held: false, sentAt, unknown: true };
      }
    };
    let checking: Promise<CheckAnswer> | undefined;
    let queued: { batches: SentBatch[]; answer: Promise<CheckAnswer> } | undefined;
    const startCheck = (batches: SentBatch[]): Promise<CheckAnswer> => {
      const current: Promise<CheckAnswer> = checkOnce(batches).finally(() => {
        if (checking === current) checking = undefined;
      });
      checking = current;
      return current;
    };
    const check = (batch: SentBatch): Promise<CheckAnswer> => {
      if (!checking) return startCheck([batch]);
      if (!queued) {
        const batches: SentBatch[] = [];
        const answer = checking.then(() => {
          queued = undefined;
          return startCheck(batches);
        });
        queued = { batches, answer };
      }
      queued.batches.push(batch);
      return queued.answer;
    };
    /** Whether the batch's call may start now; `recorded` is set once its check has recorded it. */
    const mayStart = async (batch: SentBatch, recorded: { value: boolean }): Promise<boolean> => {
      if (lostClaim || failure) return false;
      const stop = this.stopReason(request.stopAt);
      if (stop) {
        stopped ??= stop;
        return false;
      }
      const answer = await check(batch);
      // A check that failed (a time-out, a lost answer) may have recorded the batch: its record is
      // forgotten like one that holds, so that no call that was never sent is sent later.
      recorded.value = answer.held || answer.unknown === true;
      if (!answer.held || lostClaim || failure) return false;
      // An answer older than the bound is not trusted: an enable may have answered since its
      // snapshot (it waits that long after its commit before answering).
      if (performance.now() - answer.sentAt > this.settings.claimCheckMaxAgeMs) {
        failure ??= new DependencyError('postgres', 'timeout', 'check_claim: answered too late to start a call');
        return false;
      }
      return true;
    };

    // 3. The database marks, one statement in flight per run: batches confirmed meanwhile are
    // marked together by the next one (fewer statements and connections for a big disable).
    type MarkWaiter = {
      ids: string[];
      finish: boolean;
      /** Settles with the ids of this batch that a lock left unmarked. */
      resolve: (skipped: string[]) => void;
      reject: (error: unknown) => void;
    };
    const marks: MarkWaiter[] = [];
    let marking = false;
    const flushMarks = async (): Promise<void> => {
      if (marking || marks.length === 0) return;
      marking = true;
      const group = marks.splice(0);
      try {
        const ids = group.flatMap((waiter) => waiter.ids);
        // The finishing statement deletes the row only when nothing else is left, whoever asked.
        const sentAt = performance.now();
        const marked = await this.withMarkSlot(request.networkId, () =>
          agents.markPaused(
            agentId,
            ids,
            lease,
            group.some((waiter) => waiter.finish),
          ),
        );
        renewedAt = Math.max(renewedAt, sentAt); // the statement renewed the lease (when the claim is ours)
        this.count(partnerName, marked.moved, request);
        paused += marked.moved;
        if (marked.finished) finishedByMark = true;
        const skipped = new Set(marked.skipped);
        for (const waiter of group) waiter.resolve(waiter.ids.filter((id) => skipped.has(id)));
      } catch (error) {
        for (const waiter of group) waiter.reject(error);
      } finally {
        marking = false;
        void flushMarks();
      }
    };
    const markPaused = (ids: string[], finish: boolean) =>
      new Promise<string[]>((resolve, reject) => {
        marks.push({ ids, finish, resolve, reject });
        void flushMarks();
      });
    const owner: CallOwner = { networkId: request.networkId, agentId, background: request.background === true };

    const processBatch = async (ids: string[], last: boolean) => {
      const batch: SentBatch = { campaignIds: ids, callKey: randomUUID() };
      const recorded = { value: false };
      let spend: { confirmed: string[] } | undefined;
      try {
        spend = await this.ports.pauseSpending(batch, () => mayStart(batch, recorded), owner);
      } catch (error) {
        // The call's outcome is not known (a time-out may have paused): its record stays, in doubt,
        // for the worker to send again with the same key once the lease runs out.
        failure ??= toDependencyError(error);
        return;
      }
      if (!spend) {
        // Recorded, then not sent after all (a late answer, a stop): no longer in doubt.
        if (recorded.value) await sentPauses.forget(batch).catch(() => undefined);
        return;
      }
      if (spend.confirmed.length < ids.length) {
        notConfirmedBy('spend_management', ids.length - spend.confirmed.length);
        const left = new Set(spend.confirmed);
        await sentPauses.forget({ campaignIds: ids.filter((id) => !left.has(id)), callKey: batch.callKey }).catch(() => undefined);
      }
      if (spend.confirmed.length === 0) return;
      for (const id of spend.confirmed) unsettled.add(id);
      const stored = await this.ports.markPausedInStore(spend.confirmed);
      if (stored.confirmed.length < spend.confirmed.length) notConfirmedBy('redis', spend.confirmed.length - stored.confirmed.length);
      if (stored.confirmed.length === 0) return;
      // The batch read as the run's last, all confirmed: its statement may finish the run too.
      const finish = last && !notConfirmed && stored.confirmed.length === ids.length;
      // The database step does not hold the batch's place in the pipeline: the next call may start
      // while the marks, one statement at a time, catch up.
      const marking = markPaused(stored.confirmed, finish).then(
        (skipped) => {
          for (const id of stored.confirmed) if (!skipped.includes(id)) unsettled.delete(id);
          if (skipped.length > 0) notConfirmedBy('postgres', skipped.length);
        },
        (error: unknown) => {
          failure ??= toDependencyError(error);
        },
      );
      marksPending.add(marking);
      void marking.finally(() => marksPending.delete(marking));
    };
    const marksPending = new Set<Promise<void>>();

    const inFlight = new Set<Promise<void>>();
    // Campaigns are read a chunk at a time (the batches one run may have in flight, plus one id that
    // tells whether more follow), then cut into batches: one read serves up to `batchesInFlight`
    // calls, so reads never starve the pipeline nor crowd the pool.
    const chunkSize = readAheadSize(this.settings);
    let next = request.firstBatch;
    const passesLeft = !lostClaim && !failure && !stopped;
    // Two passes at most: a campaign committed while the flag statement waited for it (the
    // restriction trigger makes them wait for each other) can sort before the first pass's cursor.
    for (let pass = 0; pass < 2 && passesLeft; pass += 1) {
      let cursor: string | null = null;
      let batches: string[][] = [];
      // Set when a read returned no more than asked for: no statement is needed to find that out.
      let exhausted = false;
      try {
        for (;;) {
          while (inFlight.size >= batchesInFlight) await Promise.race(inFlight);
          if (failure || lostClaim || stopped) break;
          const stop = this.stopReason(request.stopAt);
          if (stop) {
            stopped = stop;
            break;
          }
          if (batches.length === 0) {
            if (exhausted) break;
            let ids: string[];
            if (next) {
              ids = next;
              next = undefined;
            } else {
              ids = await agents.nextBatch(agentId, cursor, chunkSize + 1);
            }
            exhausted = ids.length <= chunkSize;
            if (!exhausted) ids = ids.slice(0, chunkSize);
            if (ids.length === 0) break;
            cursor = ids.at(-1)!;
            batches = [];
            for (let at = 0; at < ids.length; at += batchSize) batches.push(ids.slice(at, at + batchSize));
          }
          const ids = batches.shift()!;
          const running: Promise<void> = processBatch(ids, exhausted && batches.length === 0)
            .catch((error: unknown) => {
              failure ??= toDependencyError(error);
            })
            .finally(() => inFlight.delete(running));
          inFlight.add(running);
        }
      } catch (error) {
        failure ??= toDependencyError(error);
      } finally {
        await Promise.allSettled([...inFlight]);
        await Promise.allSettled([...marksPending]);
      }
      // The last batch's statement found nothing left (so no batch failed or went unconfirmed).
      if (finishedByMark) return { kind: 'completed', paused };
      if (lostClaim || failure || notConfirmed) break;
      // Stopped by a deadline or a shutdown right after the last batch: the finishing statement
      // (it deletes the row only when nothing is left) tells whether the run is in fact complete.
      try {
        if (await queue.finish(agentId, claimToken)) return { kind: 'completed', paused };
      } catch (error) {
        failure = toDependencyError(error);
        break;
      }
      if (stopped) break;
    }

    const cause: RunCause = failure
      ? { kind: 'dependency', error: failure }
      : stopped
        ? { kind: stopped }
        : notConfirmed
          ? { kind: 'not_confirmed', dependency: notConfirmed }
          : { kind: 'unfinished' };
    if (!lostClaim) {
      // Stopped by a deadline or a shutdown: due at once, for the worker of any replica. After a
      // failure: due after a capped exponential backoff. If this write fails, the lease runs out
      // by itself and the row becomes due all the same.
      const now = cause.kind === 'deadline' || cause.kind === 'shutdown';
      const held = await queue
        .release(agentId, claimToken, now ? 'now' : { backoff: this.settings.backoff }, now ? null : describeCause(cause))
        .catch(() => true);
      if (!held) lostClaim = true;
    }
    // Paused in spend management, not yet everywhere: the write-ahead record has them; handed to
    // the worker of any replica at once (if this write fails, their lease runs out all the same).
    if (unsettled.size > 0) await sentPauses.handOver([...unsettled]).catch(() => undefined);
    if (lostClaim) return { kind: 'lost_claim', paused };
    const remaining = await agents.remainingCampaigns(agentId).catch(() => undefined);
    return { kind: 'incomplete', paused, remaining, cause };
  }

  /**
   * Runs a batch statement when its network has fewer than `marksPerNetwork` in flight: the request
   * pool's connections are shared by every network's requests, and one network's big disables
   * (each mark up to a chunk of rows) must not hold them all (docs/interfaces.md §10). A mark that
   * waits here is merged with the next batches of its run meanwhile, so it costs no more statements.
   */
  private async withMarkSlot<T>(networkId: string, statement: () => Promise<T>): Promise<T> {
    let slots = this.marking.get(networkId);
    if (!slots) {
      slots = { active: 0, waiting: [] };
      this.marking.set(networkId, slots);
    }
    const held = slots;
    // A slot is either taken at once or handed over by the statement that ends (never both).
    if (held.active < marksPerNetwork) held.active += 1;
    else await new Promise<void>((resolve) => held.waiting.push(resolve));
    try {
      return await statement();
    } finally {
      const next = held.waiting.shift();
      if (next) next();
      else {
        held.active -= 1;
        if (held.active === 0 && this.marking.get(networkId) === held) this.marking.delete(networkId);
      }
    }
  }

  private count(partnerName: string, moved: number, request: Pick<RunRequest, 'onPaused'>): void {
    if (moved === 0) return;
    this.metrics.campaignsPaused.inc({ partner: partnerName }, moved);
    request.onPaused?.(moved);
  }

  /**
   * Settles recorded pause calls that nobody settles (claimed by the worker from the write-ahead
   * record): a call whose outcome is in doubt is sent again with its own idempotency key (the same
   * call, completed: not a new one, so an enable does not stop it), then what spend management
   * confirmed is paused in Redis and marked in the database, which deletes its record. What is
   * left is given back with a backoff. Resolves with the campaigns settled.
   */
  async settleRecorded(claim: RecordedClaim, stores: Pick<RunStores, 'agents' | 'sentPauses'>): Promise<number> {
    const nil = this.lease('00000000-0000-0000-0000-000000000000');
    const confirmedSoFar: string[] = [];
    let lastError: string | null = null;
    const settleCall = async (call: RecordedCall): Promise<number> => {
      let confirmed = call.confirmed;
      if (call.inDoubt.length > 0) {
        const owner: CallOwner = { networkId: '', agentId: call.agentId, background: true };
        const again = await this.ports.pauseSpending({ campaignIds: call.inDoubt, callKey: call.callKey }, async () => true, owner);
        const paused = new Set(again?.confirmed ?? []);
        const left = call.inDoubt.filter((id) => !paused.has(id));
        if (left.length > 0) await stores.sentPauses.forget({ campaignIds: left, callKey: call.callKey });
        confirmed = [...confirmed, ...call.inDoubt.filter((id) => paused.has(id))];
      }
      confirmedSoFar.push(...confirmed);
      if (confirmed.length === 0) return 0;
      const stored = await this.ports.markPausedInStore(confirmed);
      if (stored.confirmed.length === 0) return 0;
      const marked = await stores.agents.markPaused(call.agentId, stored.confirmed, nil, false);
      this.count(call.partnerName, marked.moved, {});
      return stored.confirmed.length - marked.skipped.length;
    };
    const results = await Promise.allSettled(claim.calls.map(settleCall));
    let settled = 0;
    for (const result of results) {
      if (result.status === 'fulfilled') settled += result.value;
      else lastError = toDependencyError(result.reason).summary;
    }
    // Rows still there (refused by Redis, a locked row, a failure) wait for their backoff.
    await stores.sentPauses.release(claim.claimToken, confirmedSoFar, this.settings.backoff, lastError);
    return settled;
  }
}

/** Campaigns one read fetches: what one run may have in flight (the recording statement reads one more). */
export function readAheadSize(settings: Pick<RunSettings, 'batchSize' | 'batchesInFlight'>): number {
  return settings.batchSize * settings.batchesInFlight;
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

function toDependencyError(error: unknown): DependencyError {
  return error instanceof DependencyError ? error : new DependencyError('postgres', 'error', (error as Error).name ?? 'error');
}
