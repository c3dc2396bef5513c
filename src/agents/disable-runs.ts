import type { Metrics } from '../observability/metrics.js';
import type { AgentRepository, Lease } from '../stores/database.js';
import { DependencyError } from '../stores/dependency-error.js';

/** CONTRACT.md section 6: the spend-management API takes 1 to 100 ids a call. */
export const maxBatchSize = 100;

/** The stores a run pauses campaigns in, each behind its breaker; both resolve with what they confirmed. */
export interface PausePorts {
  pauseSpending: (campaignIds: readonly string[]) => Promise<{ confirmed: string[] }>;
  markPausedInStore: (campaignIds: readonly string[]) => Promise<{ confirmed: string[] }>;
}

export interface RunSettings {
  batchSize: number;
  /** Batches of one run in flight at once. */
  batchesInFlight: number;
  leaseMs: number;
  backoff: { baseMs: number; maxMs: number };
  /** The longest one batch can take (spend-management and Redis time-outs plus the database). */
  batchBudgetMs: number;
  /** This replica, as recorded in pending_disables.lease_owner. */
  owner: string;
}

/** Why a run stopped before every campaign was paused. */
export type RunCause =
  | { kind: 'dependency'; error: DependencyError }
  | { kind: 'not_confirmed'; dependency: 'spend_management' | 'redis' }
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
  claimToken: string;
  /** The statements to use: the request pool's or the worker's. */
  agents: AgentRepository;
  /** Read by the statement that claimed the row (up to batchSize + 1 ids); otherwise the run reads its own. */
  firstBatch?: string[];
  /** Epoch ms by which the run stops starting batches (the request's deadline). */
  stopAt: number;
}

interface ActiveRun {
  networkId: string;
  done: Promise<RunEnd>;
}

/**
 * Runs pending disables: the one pipeline that both a request and the convergence worker drive,
 * and the registry of the runs going on in this replica (so that a repeated request joins a run
 * instead of repeating its calls).
 *
 * Per batch the order is spend management, then Redis, then the database (the commit point), so
 * a campaign paused in the database is paused everywhere at every moment, whichever batches are in
 * flight. Several batches of one run overlap; before each batch starts, one read checks the claim
 * and reads the batch, so a run whose claim is gone (superseded by an enable, or taken over) starts
 * no further pause call; a timer renews the lease meanwhile. A batch already sent to spend management is always completed in
 * Redis and the database.
 */
export class DisableRunner {
  private readonly runs = new Map<string, ActiveRun>();
  private stopAllAt = Number.POSITIVE_INFINITY;

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

  /** Shutdown: every run stops between batches once it could not finish one more by `at`. */
  stopBy(at: number): void {
    this.stopAllAt = Math.min(this.stopAllAt, at);
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

  private async execute(request: RunRequest): Promise<RunEnd> {
    const { agentId, agents, claimToken } = request;
    const { batchSize, batchesInFlight, batchBudgetMs } = this.settings;
    const lease = this.lease(claimToken);
    let paused = 0;
    let failure: DependencyError | undefined;
    let notConfirmed: 'spend_management' | 'redis' | undefined;
    let lostClaim = false;
    let stopped: 'deadline' | 'shutdown' | undefined;

    // Keeps the lease while batches are slow (waiting for spend-management capacity, say).
    const renewal = setInterval(
      () => {
        agents.renew(agentId, lease).then(
          (held) => {
            if (!held) lostClaim = true;
          },
          () => undefined,
        );
      },
      Math.max(250, Math.floor(this.settings.leaseMs / 3)),
    );
    renewal.unref();

    let finishedByMark = false;
    const processBatch = async (ids: string[], last: boolean) => {
      const spend = await this.ports.pauseSpending(ids);
      if (spend.confirmed.length < ids.length) {
        notConfirmed ??= 'spend_management';
        this.metrics.campaignsNotConfirmed.inc({ dependency: 'spend_management' }, ids.length - spend.confirmed.length);
      }
      if (spend.confirmed.length === 0) return;
      const stored = await this.ports.markPausedInStore(spend.confirmed);
      if (stored.confirmed.length < spend.confirmed.length) {
        notConfirmed ??= 'redis';
        this.metrics.campaignsNotConfirmed.inc({ dependency: 'redis' }, spend.confirmed.length - stored.confirmed.length);
      }
      if (stored.confirmed.length === 0) return;
      // The batch read as the run's last, all confirmed: its statement may finish the run too.
      const finish = last && !notConfirmed && stored.confirmed.length === ids.length;
      const marked = await agents.markPaused(agentId, stored.confirmed, finish ? claimToken : undefined);
      paused += marked.moved; // not `paused += await …`: that would read `paused` before other batches add to it
      if (marked.finished) finishedByMark = true;
    };

    const inFlight = new Set<Promise<void>>();
    let next = request.firstBatch;
    // Two passes at most: a campaign committed while the flag statement waited for it (the
    // restriction trigger makes them wait for each other) can sort before the first pass's cursor.
    for (let pass = 0; pass < 2; pass += 1) {
      let cursor: string | null = null;
      // Each read asks for one campaign more than a batch: when it is not there, the batch was the
      // last one and no statement is needed to find that out.
      let exhausted = false;
      try {
        for (;;) {
          while (inFlight.size >= batchesInFlight) await Promise.race(inFlight);
          if (failure || lostClaim || exhausted) break;
          const now = Date.now();
          if (now + batchBudgetMs > this.stopAllAt) {
            stopped = 'shutdown';
            break;
          }
          if (now + batchBudgetMs > request.stopAt) {
            stopped = 'deadline';
            break;
          }
          let ids: string[];
          if (next) {
            ids = next;
            next = undefined;
          } else {
            const batch = await agents.nextBatch(agentId, lease, cursor, batchSize + 1);
            if (!batch.held) {
              lostClaim = true;
              break;
            }
            ids = batch.ids;
          }
          if (ids.length === 0) break;
          exhausted = ids.length <= batchSize;
          if (!exhausted) ids = ids.slice(0, batchSize);
          cursor = ids.at(-1)!;
          const running: Promise<void> = processBatch(ids, exhausted)
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
      }
      // The last batch's statement found nothing left (so no batch failed or went unconfirmed).
      if (finishedByMark) {
        clearInterval(renewal);
        return { kind: 'completed', paused };
      }
      // Stopped by a deadline or a shutdown right after the last batch: the finishing statement
      // (it deletes the row only when nothing is left) tells whether the run is in fact complete.
      if (lostClaim || failure || notConfirmed) break;
      try {
        if (await agents.finish(agentId, claimToken)) {
          clearInterval(renewal);
          return { kind: 'completed', paused };
        }
      } catch (error) {
        failure = toDependencyError(error);
        break;
      }
      if (stopped) break;
    }
    clearInterval(renewal);

    if (lostClaim) return { kind: 'lost_claim', paused };
    const cause: RunCause = failure
      ? { kind: 'dependency', error: failure }
      : stopped
        ? { kind: stopped }
        : { kind: 'not_confirmed', dependency: notConfirmed ?? 'spend_management' };
    const lastError = cause.kind === 'dependency' || cause.kind === 'not_confirmed' ? describeCause(cause) : null;
    // Stopped by a deadline or a shutdown: due at once, for the worker of any replica. After a
    // failure: due after a capped exponential backoff. If this write fails, the lease runs out
    // by itself and the row becomes due all the same.
    await agents
      .release(
        agentId,
        claimToken,
        cause.kind === 'deadline' || cause.kind === 'shutdown' ? 'now' : { backoff: this.settings.backoff },
        lastError,
      )
      .catch(() => undefined);
    const remaining = await agents.remainingCampaigns(agentId).catch(() => undefined);
    return { kind: 'incomplete', paused, remaining, cause };
  }
}

/** `<dependency>:<error class>` (as kept in pending_disables.last_error), or the stop reason. */
export function describeCause(cause: RunCause): string {
  if (cause.kind === 'dependency') return cause.error.summary;
  if (cause.kind === 'not_confirmed') return `${cause.dependency}:not_confirmed`;
  return cause.kind;
}

function toDependencyError(error: unknown): DependencyError {
  return error instanceof DependencyError ? error : new DependencyError('postgres', 'error', (error as Error).name ?? 'error');
}
