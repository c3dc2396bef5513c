// One run's database marks, one statement in flight, within the replica's mark slots per network.
import { type Clock, systemClock } from '../clock.js';
import type { AgentRepository, Lease } from '../stores/agent-repository.js';

/** Batch statements one network's runs have in flight at once in a replica. */
const marksPerNetwork = 2;

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
    private readonly agents: Pick<AgentRepository, 'markPaused'>,
    private readonly run: { agentId: string; networkId: string; lease: Lease },
    private readonly slots: MarkSlots,
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
      const { agentId, networkId, lease } = this.run;
      const finish = group.some((waiting) => waiting.finish);
      const settled = group.flatMap((waiting) => (waiting.settles ? [waiting.settles] : []));
      const marked = await this.slots.run(networkId, () => this.agents.markPaused(agentId, ids, lease, finish, settled));
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
