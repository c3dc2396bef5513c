// The replica's spend-management slots, shared fairly between networks, agents and the worker.
import { performance } from 'node:perf_hooks';
import { DependencyError } from '../observability/dependency-calls.js';

/** Who a spend-management call is for: a request's run (its network and agent) or the worker's. */
export interface CallOwner {
  networkId: string;
  agentId: string;
  /** The worker's runs take only what requests leave free. */
  background: boolean;
}

type Start = () => void;

/** Something that hands out waiting calls one at a time. */
interface Lane<S> {
  take(): S | undefined;
  readonly size: number;
}

class Fifo<S> implements Lane<S> {
  private readonly items: S[] = [];
  push(item: S): void {
    this.items.push(item);
  }
  take(): S | undefined {
    return this.items.shift();
  }
  get size(): number {
    return this.items.length;
  }
}

/** Lanes by key, served round robin: each key with something waiting takes one turn in turn. */
class Turns<L extends Lane<S>, S> implements Lane<S> {
  private readonly lanes = new Map<string, L>();
  private readonly order: string[] = [];
  private cursor = 0;

  lane(key: string, create: () => L): L {
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = create();
      this.lanes.set(key, lane);
      this.order.push(key);
    }
    return lane;
  }

  take(): S | undefined {
    if (this.order.length === 0) return undefined;
    if (this.cursor >= this.order.length) this.cursor = 0;
    const key = this.order[this.cursor]!;
    const lane = this.lanes.get(key)!;
    const item = lane.take();
    if (lane.size === 0) {
      this.lanes.delete(key);
      this.order.splice(this.cursor, 1);
    } else {
      this.cursor += 1;
    }
    return item;
  }

  get size(): number {
    let size = 0;
    for (const lane of this.lanes.values()) size += lane.size;
    return size;
  }
}

/**
 * The replica's spend-management capacity (docs/interfaces.md §10), shared fairly: at most
 * `capacity` calls in flight. When a slot frees it goes, round robin, to the next network with a
 * request's call waiting, and within that network round robin to the next agent: one network's
 * disables slow another's by at most its fair share, and one big disable does not hold back a small
 * one of the same network. The worker's calls wait in a queue of their own, served when no
 * request's call waits, or as soon as the oldest of them has waited `backgroundMaxWaitMs`: then it
 * goes first, so requests that never stop coming cannot hold a pending disable back for ever (the
 * worker's runs get at most one slot in turn that way, and only while they are starved). A disable
 * alone in the replica gets every slot and gives them back, one by one, as others arrive. Each network's queue is bounded (`maxQueuedPerNetwork`): past that a call
 * fails at once as `spend_management:busy`, without reaching the dependency or its breaker.
 */
export class SpendScheduler {
  private active = 0;
  /** Requests' calls: networks in turn, then agents in turn within a network. */
  private readonly requests = new Turns<Turns<Fifo<Start>, Start>, Start>();
  private readonly background = new Turns<Fifo<Start>, Start>();
  /** When each waiting worker's call started waiting (monotonic ms), oldest first. */
  private readonly backgroundSince: number[] = [];

  constructor(
    private readonly capacity: number,
    private readonly maxQueuedPerNetwork: number,
    private readonly backgroundMaxWaitMs = Number.POSITIVE_INFINITY,
    private readonly now: () => number = () => performance.now(),
  ) {}

  get inFlight(): number {
    return this.active;
  }

  /** Runs `task` in a slot, when its turn comes (started in the turn of the slot that freed). */
  run<T>(owner: CallOwner, task: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.enqueue(
        owner,
        (release) => {
          task().then(resolve, reject).finally(release);
        },
        reject,
      );
    });
  }

  /** A slot, when `owner`'s turn comes; held until released (releasing twice releases once). */
  acquire(owner: CallOwner): Promise<{ release(): void }> {
    return new Promise((resolve, reject) => this.enqueue(owner, (release) => resolve({ release }), reject));
  }

  /** Queues `owner`'s wait for a slot: `granted` is called with its release once the turn comes. */
  private enqueue(owner: CallOwner, granted: (release: () => void) => void, reject: (error: unknown) => void): void {
    const start: Start = () => {
      this.active += 1;
      let held = true;
      granted(() => {
        if (!held) return;
        held = false;
        this.active -= 1;
        this.dispatch();
      });
    };
    if (owner.background) {
      this.background.lane(owner.agentId, () => new Fifo()).push(start);
      this.backgroundSince.push(this.now());
    } else {
      const agents = this.requests.lane(owner.networkId, () => new Turns());
      if (agents.size >= this.maxQueuedPerNetwork) {
        reject(new DependencyError('spend_management', 'busy', 'too many calls of this network waiting for a slot'));
        return;
      }
      agents.lane(owner.agentId, () => new Fifo()).push(start);
    }
    this.dispatch();
  }

  private dispatch(): void {
    while (this.active < this.capacity) {
      const starved = this.backgroundSince.length > 0 && this.now() - this.backgroundSince[0]! >= this.backgroundMaxWaitMs;
      const next = (starved ? undefined : this.requests.take()) ?? this.takeBackground() ?? this.requests.take();
      if (!next) return;
      next();
    }
  }

  private takeBackground(): Start | undefined {
    const next = this.background.take();
    // The worker's lanes are served in turn, not in arrival order: the oldest wait stands for them all.
    if (next) this.backgroundSince.shift();
    return next;
  }
}
