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

const bounds = new AsyncLocalStorage<{ until: number }>();

/**
 * Runs `work` with every statement it makes (through any gated pool) waiting for a connection
 * until `until` at most (monotonic ms, performance.now()), and never past a bound set further out.
 */
export function waitingUntil<T>(until: number, work: () => Promise<T>): Promise<T> {
  const outer = bounds.getStore()?.until ?? Number.POSITIVE_INFINITY;
  return bounds.run({ until: Math.min(until, outer) }, work);
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
}

/**
 * `pool` behind a gate of `size` slots (the pool's maxPoolSize): a statement waits for a slot at
 * most `maxWaitMs`, or less when the caller set a nearer bound (waitingUntil); past it, it fails
 * with PoolWaitExceeded and is never sent. Slots are handed out in arrival order.
 */
export function gatedPool(pool: DatabasePool, name: string, size: number, maxWaitMs: number): DatabasePool {
  let active = 0;
  const waiting: Waiter[] = [];

  const release = () => {
    active -= 1;
    const next = waiting.shift();
    if (next) next.start();
  };

  function slot(): Promise<void> {
    if (active < size && waiting.length === 0) {
      active += 1;
      return Promise.resolve();
    }
    const startedAt = performance.now();
    const until = Math.min(startedAt + maxWaitMs, bounds.getStore()?.until ?? Number.POSITIVE_INFINITY);
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        timer: undefined,
        start: () => {
          clearTimeout(waiter.timer);
          active += 1;
          resolve();
        },
      };
      waiter.timer = setTimeout(
        () => {
          const index = waiting.indexOf(waiter);
          if (index >= 0) waiting.splice(index, 1);
          reject(new PoolWaitExceeded(`no ${name} connection free within ${Math.round(performance.now() - startedAt)} ms`));
        },
        Math.max(0, until - startedAt),
      );
      waiting.push(waiter);
    });
  }

  return new Proxy(pool, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver) as unknown;
      if (typeof property !== 'string' || !connectionMethods.has(property) || typeof value !== 'function') return value;
      return async (...args: unknown[]) => {
        await slot();
        try {
          return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        } finally {
          release();
        }
      };
    },
  });
}
