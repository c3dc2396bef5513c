import { DependencyError } from '../observability/dependency-calls.js';

/** Who a spend-management call is for: a request's run (its network and agent) or the worker's. */
export interface CallOwner {
  networkId: string;
  agentId: string;
  /** The worker's runs take only what requests leave free. */
  background: boolean;
}

type Start = () => void;

/** FIFO queues by key, served round robin: each key with something waiting gets one turn in turn. */
class RoundRobin<V> {
  private readonly queues = new Map<string, V[]>();
  private readonly order: string[] = [];
  private cursor = 0;
  total = 0;

  push(key: string, value: V): void {
    let queue = this.queues.get(key);
    if (!queue) {
      queue = [];
      this.queues.set(key, queue);
      this.order.push(key);
    }
    queue.push(value);
    this.total += 1;
  }

  shift(): V | undefined {
    if (this.order.length === 0) return undefined;
    if (this.cursor >= this.order.length) this.cursor = 0;
    const key = this.order[this.cursor]!;
    const queue = this.queues.get(key)!;
    const value = queue.shift()!;
    this.total -= 1;
    if (queue.length === 0) {
      this.queues.delete(key);
      this.order.splice(this.cursor, 1);
    } else {
      this.cursor += 1;
    }
    return value;
  }
}

/**
 * The replica's spend-management capacity (docs/interfaces.md §10), shared fairly: at most
 * `capacity` calls in flight. When a slot frees it goes, round robin, to the next network with a
 * request's call waiting, and within that network round robin to the next agent: one network's
 * disables slow another's by at most its fair share, and one big disable does not hold back a small
 * one of the same network. The worker's calls wait in a queue of their own, served only when no
 * request's call waits. A disable alone in the replica gets every slot and gives them back, one by
 * one, as others arrive. Each network's queue is bounded (`maxQueuedPerNetwork`): past that a call
 * fails at once as `spend_management:busy`, without reaching the dependency or its breaker.
 */
export class SpendScheduler {
  private active = 0;
  private readonly networks = new Map<string, RoundRobin<Start>>();
  private readonly networkOrder: string[] = [];
  private networkCursor = 0;
  private readonly background = new RoundRobin<Start>();

  constructor(
    private readonly capacity: number,
    private readonly maxQueuedPerNetwork: number,
  ) {}

  get inFlight(): number {
    return this.active;
  }

  /** Runs `task` in a slot, when its turn comes. */
  run<T>(owner: CallOwner, task: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const start: Start = () => {
        this.active += 1;
        task()
          .then(resolve, reject)
          .finally(() => {
            this.active -= 1;
            this.dispatch();
          });
      };
      if (owner.background) {
        this.background.push(owner.agentId, start);
      } else {
        let agents = this.networks.get(owner.networkId);
        if (!agents) {
          agents = new RoundRobin<Start>();
          this.networks.set(owner.networkId, agents);
          this.networkOrder.push(owner.networkId);
        }
        if (agents.total >= this.maxQueuedPerNetwork) {
          reject(new DependencyError('spend_management', 'busy', 'too many calls of this network waiting for a slot'));
          return;
        }
        agents.push(owner.agentId, start);
      }
      this.dispatch();
    });
  }

  private dispatch(): void {
    while (this.active < this.capacity) {
      const next = this.nextRequest() ?? this.background.shift();
      if (!next) return;
      next();
    }
  }

  /** One call of the next network in turn; a network with nothing left waiting leaves the turn. */
  private nextRequest(): Start | undefined {
    if (this.networkOrder.length === 0) return undefined;
    if (this.networkCursor >= this.networkOrder.length) this.networkCursor = 0;
    const networkId = this.networkOrder[this.networkCursor]!;
    const agents = this.networks.get(networkId)!;
    const start = agents.shift();
    if (agents.total === 0) {
      this.networks.delete(networkId);
      this.networkOrder.splice(this.networkCursor, 1);
    } else {
      this.networkCursor += 1;
    }
    return start;
  }
}
