// One bulk change's recording: its enables and its disables, many agents a statement.
import { DependencyError } from '../observability/dependency-calls.js';
import type { AgentBatchStatements, BatchDisable, BatchEnable } from '../stores/agent-batches.js';
import type { AgentRepository, ChangeAuthor, DisableOutcome, Lease } from '../stores/agent-repository.js';
import { waitingUntil } from '../stores/pool-wait.js';

/**
 * Agents one recording statement takes: a statement of 100 runs in a few tens of milliseconds, so
 * another network's single change that waits behind it waits no longer than behind a mark.
 */
const agentsPerStatement = 100;

/** PostgreSQL's deadlock_detected: the statement was rolled back, and its changes are made one by one. */
const deadlock = '40P01';

interface Waiting<T, A> {
  agentId: string;
  args: A;
  resolve: (value: T) => void;
  reject: (error: unknown) => void;
}

type EnableMade = { supersededDisable: boolean } | false;
/** The disable's claim (a fresh lease of the replica, with the change's trace context) and its first read's size. */
type DisableArgs = { lease: Lease & { traceParent: string | null }; batchSize: number };

export interface BulkRecorderDeps {
  batches: AgentBatchStatements;
  /** The single statements: an enable whose agent row another transaction holds, and a statement that hit a deadlock. */
  agents: Pick<AgentRepository, 'enable' | 'disable'>;
  networkId: string;
  author: ChangeAuthor;
  /** Recording statements in flight at once (BULK_STATEMENTS_IN_FLIGHT). */
  statementsInFlight: number;
}

/**
 * The recording statements of one bulk change (docs/interfaces.md §16). Every change of the batch
 * asks for its own recording (its enable, or its disable with its own claim) as the single change
 * does; the asks that arrive together, as a batch's do, are made together, up to
 * `agentsPerStatement` a statement and `statementsInFlight` statements at once. Each change gets
 * what its single statement would have answered; a statement that fails fails only its own agents.
 */
export class BulkRecorder {
  private readonly enables: Array<Waiting<EnableMade, { startBy: number }>> = [];
  private readonly disables: Array<Waiting<DisableOutcome | undefined, DisableArgs>> = [];
  private flushing = false;
  private inFlight = 0;

  constructor(private readonly deps: BulkRecorderDeps) {}

  /** The agent's enable (false: not an agent of the network); not started after `startBy` (monotonic ms). */
  enable(agentId: string, startBy: number): Promise<EnableMade> {
    return new Promise((resolve, reject) => {
      this.enables.push({ agentId, args: { startBy }, resolve, reject });
      this.schedule();
    });
  }

  /** The agent's disable, recorded with its claim as AgentRepository.disable records it (undefined: not of the network). */
  disable(agentId: string, args: DisableArgs): Promise<DisableOutcome | undefined> {
    return new Promise((resolve, reject) => {
      this.disables.push({ agentId, args, resolve, reject });
      this.schedule();
    });
  }

  /** The asks of one turn of the event loop are made together: a batch's changes all ask in the same one. */
  private schedule(): void {
    if (this.flushing) return;
    this.flushing = true;
    setImmediate(() => {
      this.flushing = false;
      this.next();
    });
  }

  private next(): void {
    while (this.inFlight < this.deps.statementsInFlight && (this.enables.length > 0 || this.disables.length > 0)) {
      this.inFlight += 1;
      const work =
        this.disables.length > 0
          ? this.disableGroup(this.disables.splice(0, agentsPerStatement))
          : this.enableGroup(this.enables.splice(0, agentsPerStatement));
      void work.finally(() => {
        this.inFlight -= 1;
        this.next();
      });
    }
  }

  private async enableGroup(group: Array<Waiting<EnableMade, { startBy: number }>>): Promise<void> {
    const { batches, networkId, author } = this.deps;
    const startBy = Math.min(...group.map((one) => one.args.startBy));
    let made: Map<string, BatchEnable>;
    try {
      made = await waitingUntil(startBy, () =>
        batches.enableMany(
          networkId,
          group.map((one) => one.agentId),
          author,
        ),
      );
    } catch (error) {
      this.failed(group, error, (one) => this.singleEnable(one));
      return;
    }
    for (const one of group) {
      const outcome = made.get(one.agentId);
      if (outcome === undefined) one.resolve(false);
      else if (outcome === 'locked') this.singleEnable(one);
      else one.resolve(outcome);
    }
  }

  private async disableGroup(group: Array<Waiting<DisableOutcome | undefined, DisableArgs>>): Promise<void> {
    const { batches, networkId, author } = this.deps;
    const disables: BatchDisable[] = group.map((one) => ({
      agentId: one.agentId,
      claimToken: one.args.lease.claimToken,
      traceParent: one.args.lease.traceParent,
    }));
    // Every lease of the replica has the same owner and length; the first read's size is the runner's.
    const { owner, leaseMs } = group[0]!.args.lease;
    try {
      const recorded = await batches.disableMany(networkId, disables, author, { owner, leaseMs }, group[0]!.args.batchSize);
      for (const one of group) one.resolve(recorded.get(one.agentId));
    } catch (error) {
      this.failed(group, error, (one) => this.singleDisable(one));
    }
  }

  /** A statement that failed: a deadlock is made again agent by agent; any other failure is each change's answer. */
  private failed<T, A>(group: Array<Waiting<T, A>>, error: unknown, single: (one: Waiting<T, A>) => void): void {
    if (error instanceof DependencyError && error.sqlstate === deadlock) {
      for (const one of group) single(one);
      return;
    }
    for (const one of group) one.reject(error);
  }

  /** The single enable, which waits for the agent row as it always does. */
  private singleEnable(one: Waiting<EnableMade, { startBy: number }>): void {
    const { agents, networkId, author } = this.deps;
    waitingUntil(one.args.startBy, () => agents.enable(networkId, one.agentId, author)).then((done) => {
      // No conditions are given: neither 'precondition_failed' nor 'key_lost' can come back.
      one.resolve(typeof done === 'string' ? false : done);
    }, one.reject);
  }

  private singleDisable(one: Waiting<DisableOutcome | undefined, DisableArgs>): void {
    const { agents, networkId, author } = this.deps;
    agents.disable(networkId, one.agentId, author, one.args.lease, one.args.batchSize).then((done) => {
      one.resolve(typeof done === 'string' ? undefined : done);
    }, one.reject);
  }
}
