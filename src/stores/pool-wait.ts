import { AsyncLocalStorage } from 'node:async_hooks';
import { performance } from 'node:perf_hooks';
import type { DatabasePool } from 'slonik';
import { DependencyError } from '../observability/dependency-calls.js';

// How long a statement may wait for a connection of its pool. slonik 49's pool queues a caller
// without any limit (its `connectionTimeout` bounds opening a connection, not waiting for one), and
// a caller that gave up waiting would still run its statement once a connection frees: a change
// committed long after its request answered. So each pool sits behind a gate of its own size, and a
// statement that gets no slot by its bound never reaches slonik at all.

/** No connection of the pool came free within the statement's bound: nothing was sent to the database. */
export class PoolWaitExceeded extends DependencyError {
  constructor(detail: string) {
    super('postgres', 'busy', detail);
  }
}

/** What the statements of a piece of work carry to the gates: their bound, and the network they serve. */
interface Scope {
  until: number;
  /** The network the work is done for; undefined: the replica's own work. */
  network: string | undefined;
}

const scopes = new AsyncLocalStorage<Scope>();

/**
 * Runs `work` with every statement it makes (through any gated pool) waiting for a connection
 * until `until` at most (monotonic ms, performance.now()), and never past a bound set further out.
 */
export function waitingUntil<T>(until: number, work: () => Promise<T>): Promise<T> {
  const outer = scopes.getStore();
  return scopes.run({ until: Math.min(until, outer?.until ?? Number.POSITIVE_INFINITY), network: outer?.network }, work);
}

/**
 * Runs `work` as the network's: where its statements wait for a connection, the gate takes turns
 * between networks (see gatedPool), so that a network with many statements queued (a bulk change of
 * 1,000 agents) does not make another network's single change wait behind all of them.
 */
export function forNetwork<T>(networkId: string, work: () => Promise<T>): Promise<T> {
  return scopes.run({ until: scopes.getStore()?.until ?? Number.POSITIVE_INFINITY, network: networkId }, work);
}

/** The query methods of a slonik pool: each takes one connection for its own time (a transaction for its callback's). */
const connectionMethods = new Set([
  'any',
  'anyFirst',
  'connect',
  'exists',
  'many',
  'manyFirst',
  'maybeOne',
  'maybeOneFirst',
  'one',
  'oneFirst',
  'query',
  'stream',
  'transaction',
]);

interface Waiter {
  start: () => void;
  timer: NodeJS.Timeout | undefined;
  /** Arrival order, across the networks' queues. */
  seq: number;
}

/** The replica's own work (no network): a queue of its own, taking turns like a network's. */
const ownWork = '';

/**
 * `pool` behind a gate of `size` slots (the pool's maxPoolSize): a statement waits for a slot at
 * most `maxWaitMs`, or less when the caller set a nearer bound (waitingUntil); past it, it fails
 * with PoolWaitExceeded and is never sent. A slot that frees goes to the network (forNetwork) that
 * holds the fewest slots among those waiting, the longest waiting first between equals: within a
 * network statements keep their arrival order, and a network's queue of a thousand does not stand
 * in front of another network's one.
 */
export function gatedPool(pool: DatabasePool, name: string, size: number, maxWaitMs: number): DatabasePool {
  let active = 0;
  let queued = 0;
  let arrivals = 0;
  const held = new Map<string, number>();
  const queues = new Map<string, Waiter[]>();

  const next = (): Waiter | undefined => {
    let chosen: [string, Waiter[]] | undefined;
    let fewest = Number.POSITIVE_INFINITY;
    for (const entry of queues) {
      const holding = held.get(entry[0]) ?? 0;
      if (holding < fewest || (holding === fewest && entry[1][0]!.seq < chosen![1][0]!.seq)) {
        chosen = entry;
        fewest = holding;
      }
    }
    if (!chosen) return undefined;
    const [network, queue] = chosen;
    const waiter = queue.shift()!;
    if (queue.length === 0) queues.delete(network);
    queued -= 1;
    return waiter;
  };

  const take = (network: string) => {
    active += 1;
    held.set(network, (held.get(network) ?? 0) + 1);
  };

  const release = (network: string) => {
    active -= 1;
    const holding = (held.get(network) ?? 1) - 1;
    if (holding === 0) held.delete(network);
    else held.set(network, holding);
    next()?.start();
  };

  function slot(network: string): Promise<void> {
    if (active < size && queued === 0) {
      take(network);
      return Promise.resolve();
    }
    const startedAt = performance.now();
    const until = Math.min(startedAt + maxWaitMs, scopes.getStore()?.until ?? Number.POSITIVE_INFINITY);
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        seq: arrivals++,
        timer: undefined,
        start: () => {
          clearTimeout(waiter.timer);
          take(network);
          resolve();
        },
      };
      waiter.timer = setTimeout(
        () => {
          const queue = queues.get(network);
          const index = queue?.indexOf(waiter) ?? -1;
          if (index >= 0) {
            queue!.splice(index, 1);
            if (queue!.length === 0) queues.delete(network);
            queued -= 1;
          }
          reject(new PoolWaitExceeded(`no ${name} connection free within ${Math.round(performance.now() - startedAt)} ms`));
        },
        Math.max(0, until - startedAt),
      );
      const queue = queues.get(network);
      if (queue) queue.push(waiter);
      else queues.set(network, [waiter]);
      queued += 1;
    });
  }

  return new Proxy(pool, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver) as unknown;
      if (typeof property !== 'string' || !connectionMethods.has(property) || typeof value !== 'function') return value;
      return async (...args: unknown[]) => {
        const network = scopes.getStore()?.network ?? ownWork;
        await slot(network);
        try {
          return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        } finally {
          release(network);
        }
      };
    },
  });
}
