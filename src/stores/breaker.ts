import CircuitBreaker from 'opossum';
import type { BreakerSettings } from '../config.js';
import { DependencyError } from '../observability/dependency-calls.js';
import { breakerStateValue, type Metrics } from '../observability/metrics.js';

export type BreakerName = 'spend_management' | 'redis';

/**
 * One opossum breaker per dependency, created once at start and shared by requests and the worker.
 * - The client owns the time-out (opossum's own is off): a hung call fails once, as one failure,
 *   and opossum never aborts other calls through a shared controller.
 * - Answers about single campaigns resolve (the action returns what was confirmed), so they count
 *   as successes: only a failure of the dependency itself can open the breaker.
 * - volumeThreshold and the rolling window are set so that a sequential caller opens it: with
 *   the defaults, three failed calls within 30 s.
 * - It also opens after `consecutiveFailures` failures in a row (five by default), whatever the
 *   window holds: opossum trips on a share of its window only, so after a busy spell of successes
 *   a dependency that starts hanging would otherwise cost every caller a full time-out until the
 *   successes age out (a dozen time-outs in a row after a hundred successes). A success
 *   resets the count; the breaker still half-opens after resetTimeoutMs and closes on a success.
 * An open breaker rejects at once with a DependencyError (mapped to 500 by the route).
 */
export function createBreaker<A extends unknown[], R>(
  name: BreakerName,
  action: (...args: A) => Promise<R>,
  settings: BreakerSettings & { operation: string },
  metrics: Metrics,
): { fire: (...args: A) => Promise<R>; refusal: () => DependencyError | undefined; breaker: CircuitBreaker<A, R> } {
  const breaker = new CircuitBreaker<A, R>(action, {
    name,
    timeout: false,
    errorThresholdPercentage: settings.errorThresholdPercentage,
    volumeThreshold: settings.volumeThreshold,
    resetTimeout: settings.resetTimeoutMs,
    rollingCountTimeout: settings.rollingWindowMs,
    rollingCountBuckets: 10,
    allowWarmUp: false,
  });

  metrics.breakerState.set({ breaker: name }, breakerStateValue.closed);
  breaker.on('open', () => metrics.breakerState.set({ breaker: name }, breakerStateValue.open));
  breaker.on('halfOpen', () => metrics.breakerState.set({ breaker: name }, breakerStateValue.half_open));
  breaker.on('close', () => metrics.breakerState.set({ breaker: name }, breakerStateValue.closed));
  const events = {
    success: 'success',
    failure: 'failure',
    timeout: 'timeout',
    reject: 'reject',
    open: 'open',
    halfOpen: 'half_open',
    close: 'close',
  } as const;
  for (const [event, label] of Object.entries(events)) {
    breaker.on(event as 'success', () => metrics.breakerEvents.inc({ breaker: name, event: label }));
  }

  let failuresInARow = 0;
  breaker.on('success', () => {
    failuresInARow = 0;
  });
  breaker.on('failure', () => {
    failuresInARow += 1;
    if (failuresInARow >= settings.consecutiveFailures) breaker.open();
  });

  async function fire(...args: A): Promise<R> {
    try {
      return await breaker.fire(...args);
    } catch (error) {
      if (error instanceof DependencyError) throw error;
      const code = (error as { code?: string }).code;
      if (code === 'EOPENBREAKER') {
        metrics.dependencyDuration.observe({ dependency: name, operation: settings.operation, outcome: 'rejected' }, 0);
        throw new DependencyError(name, 'breaker_open', 'circuit open, call not attempted');
      }
      throw new DependencyError(name, 'unavailable', code ?? (error as Error).message);
    }
  }

  /**
   * While the breaker is open: the refusal of a call that is then not attempted, counted as one
   * opossum rejects (for a caller that must know before it records the call); undefined otherwise.
   */
  function refusal(): DependencyError | undefined {
    if (!breaker.opened) return undefined;
    metrics.breakerEvents.inc({ breaker: name, event: 'reject' });
    metrics.dependencyDuration.observe({ dependency: name, operation: settings.operation, outcome: 'rejected' }, 0);
    return new DependencyError(name, 'breaker_open', 'circuit open, call not attempted');
  }

  return { fire, refusal, breaker };
}
