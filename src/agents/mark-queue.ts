// One run's database marks, one statement in flight, within the replica's mark slots per network.
import { type Clock, systemClock } from '../clock.js';
import { DependencyError } from '../observability/dependency-calls.js';
import type { AgentBatchStatements, BatchMark } from '../stores/agent-batches.js';
import type { AgentRepository } from '../stores/agent-repository.js';

/** Batch statements one network's runs have in flight at once in a replica. */
const marksPerNetwork = 2;

/** Runs' marks one statement of a bulk change takes (SharedMarks). */
const marksPerStatement = 100;

/**
 * The replica's batch statements (marks) in flight, by network: at most `marksPerNetwork` each. The
 * request pool's connections are shared by every network's requests, and one network's big
 * disables (each mark up to a chunk of rows) must not hold them all (docs/interfaces.md §10). A mark
 * that waits here is merged with the next batches of its run meanwhile, so it costs no more
 * statements.
 */
export class MarkSlots {
  private readonly byNetwork = new Map<string, { active: number; waiting: Array<() => void> }>();

  async run<T>(networkId: string, statement: () => Promise<T>): Promise<T> {
    let slots = this.byNetwork.get(networkId);
    if (!slots) {
      slots = { active: 0, waiting: [] };
      this.byNetwork.set(networkId, slots);
    }
    const network = slots;
    // A slot is either taken at once or handed over by the statement that ends (never both).
    if (network.active < marksPerNetwork) network.active += 1;
    else await new Promise<void>((resolve) => network.waiting.push(resolve));
    try {
      return await statement();
    } finally {
      const next = network.waiting.shift();
      if (next) next();
      else {
        network.active -= 1;
        if (network.active === 0 && this.byNetwork.get(networkId) === network) this.byNetwork.delete(networkId);
      }
    }
  }
}

/** What one mark statement did (AgentRepository.markPaused's answer). */
export type Marked = Awaited<ReturnType<AgentRepository['markPaused']>>;

interface WaitingMark {
  ids: string[];
  finish: boolean;
  /** The call whose record this mark settles (every campaign it confirmed is in `ids`), if any. */
  settles: string | undefined;
  /** Settles with the ids of this batch that a lock left unmarked. */
  resolve: (skipped: string[]) => void;
  reject: (error: unknown) => void;
}

/**
 * One run's database marks, one statement in flight: batches confirmed meanwhile are marked together
 * by the next one (fewer statements and connections for a big disable). The statement that finishes
 * deletes the pending row only when nothing else is left, whichever batch asked.
 */
export class MarkQueue {
  private readonly waiting: WaitingMark[] = [];
  private statementInFlight = false;

  constructor(
    /** The statement of one mark: the run's own, or its part of a bulk change's (SharedMarks). */
    private readonly statement: (mark: Omit<BatchMark, 'agentId' | 'claim'>) => Promise<Marked>,
    /** Called after each statement, with when it was sent (monotonic ms). */
    private readonly onMarked: (marked: Marked, sentAt: number) => void,
    private readonly clock: Clock = systemClock,
  ) {}

  /**
   * Marks the batch paused, and deletes the record of the call `settles` with it unless a lock left
   * one of its campaigns out; resolves with its ids that a lock left unmarked.
   */
  mark(ids: string[], finish: boolean, settles?: string): Promise<string[]> {
    return new Promise<string[]>((resolve, reject) => {
      this.waiting.push({ ids, finish, settles, resolve, reject });
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    if (this.statementInFlight || this.waiting.length === 0) return;
    this.statementInFlight = true;
    const group = this.waiting.splice(0);
    try {
      const ids = group.flatMap((waiting) => waiting.ids);
      const sentAt = this.clock.now();
      const finish = group.some((waiting) => waiting.finish);
      const settledCalls = group.flatMap((waiting) => (waiting.settles ? [waiting.settles] : []));
      const marked = await this.statement({ campaignIds: ids, finish, settledCalls });
      this.onMarked(marked, sentAt);
      const skipped = new Set(marked.skipped);
      for (const waiting of group) waiting.resolve(waiting.ids.filter((id) => skipped.has(id)));
    } catch (error) {
      for (const waiting of group) waiting.reject(error);
    } finally {
      this.statementInFlight = false;
      void this.flush();
    }
  }
}

interface SharedMark {
  mark: BatchMark;
  resolve: (marked: Marked) => void;
  reject: (error: unknown) => void;
}

/** PostgreSQL's deadlock_detected: the statement was rolled back, and its marks are made one by one. */
const deadlock = '40P01';

/**
 * The marks of one bulk change's runs (docs/interfaces.md §16), many runs a statement: the runs of a
 * shared spend-management call are confirmed together, so their marks arrive together and are made
 * by one statement (AgentBatchStatements.markPausedMany), each as its run's own mark would be. At
 * most `marksPerNetwork` such statements are in flight, in the network's mark slots: what arrives
 * meanwhile waits and goes into the next one.
 */
export class SharedMarks {
  private readonly waiting: SharedMark[] = [];
  private scheduled = false;
  private inFlight = 0;

  constructor(
    private readonly batches: Pick<AgentBatchStatements, 'markPausedMany'>,
    /** The single mark, for the marks of a statement that hit a deadlock. */
    private readonly agents: Pick<AgentRepository, 'markPaused'>,
    private readonly networkId: string,
    private readonly slots: MarkSlots,
  ) {}

  mark(mark: BatchMark): Promise<Marked> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ mark, resolve, reject });
      if (this.scheduled) return;
      this.scheduled = true;
      // The other runs of the same call are a few promise steps behind.
      setImmediate(() => {
        this.scheduled = false;
        this.next();
      });
    });
  }

  private next(): void {
    while (this.inFlight < marksPerNetwork && this.waiting.length > 0) {
      this.inFlight += 1;
      void this.statement(this.waiting.splice(0, marksPerStatement)).finally(() => {
        this.inFlight -= 1;
        this.next();
      });
    }
  }

  private async statement(group: SharedMark[]): Promise<void> {
    let marked: Map<string, Marked>;
    try {
      marked = await this.slots.run(this.networkId, () => this.batches.markPausedMany(group.map((one) => one.mark)));
    } catch (error) {
      if (!(error instanceof DependencyError && error.sqlstate === deadlock)) {
        for (const one of group) one.reject(error);
        return;
      }
      for (const { mark, resolve, reject } of group) {
        this.slots
          .run(this.networkId, () => this.agents.markPaused(mark.agentId, mark.campaignIds, mark.claim, mark.finish, mark.settledCalls))
          .then(resolve, reject);
      }
      return;
    }
    for (const one of group) {
      const answer = marked.get(one.mark.agentId);
      if (answer) one.resolve(answer);
      else one.reject(new DependencyError('postgres', 'error', 'mark_campaigns_paused: no row for a run of the statement'));
    }
  }
}
