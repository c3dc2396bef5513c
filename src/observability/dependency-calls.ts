import type { DependencyName, Metrics } from './metrics.js';

export type DependencyFailure =
  | 'breaker_open'
  | 'timeout'
  | 'unavailable'
  | 'busy'
  | 'bad_response'
  | 'unauthorized'
  | 'constraint'
  | 'error';

/**
 * A dependency (spend management, Redis, PostgreSQL) failed or its breaker is open. Carries only
 * what is safe to log: which dependency, what kind of failure, an HTTP status or error code. The
 * original error (an HTTP client's error may hold the request's headers, the bearer token among them) is not
 * kept, so nothing secret can reach a log line or an error body through it.
 */
export class DependencyError extends Error {
  override readonly name = 'DependencyError';
  constructor(
    readonly dependency: 'spend_management' | 'redis' | 'postgres' | 'secrets_manager',
    readonly reason: DependencyFailure,
    detail: string,
    /** The HTTP status a dependency answered with, when it answered. */
    readonly status?: number,
  ) {
    super(`${dependency} ${reason}: ${detail}`);
  }

  /** `<dependency>:<error class>`, as kept in pending_disables.last_error. */
  get summary(): string {
    return `${this.dependency}:${this.reason}`;
  }
}

/** What an ioredis error says about Redis (never about a key): its command time-out, or unavailable. */
export function redisFailure(error: unknown): DependencyError {
  const message = (error as Error).message ?? '';
  return new DependencyError('redis', /timed? ?out/i.test(message) ? 'timeout' : 'unavailable', message.slice(0, 120));
}

/**
 * The one timing wrapper for dependency calls: observes dependency_request_duration_seconds with
 * the call's outcome and turns whatever the call threw into a DependencyError.
 */
export async function timedCall<T>(
  metrics: Metrics,
  dependency: DependencyName,
  operation: string,
  run: () => Promise<T>,
  toError: (error: unknown) => DependencyError,
): Promise<T> {
  const stop = metrics.dependencyDuration.startTimer({ dependency, operation });
  try {
    const result = await run();
    stop({ outcome: 'ok' });
    return result;
  } catch (error) {
    stop({ outcome: 'error' });
    const failure = error instanceof DependencyError ? error : toError(error);
    metrics.dependencyErrors.inc({ dependency, reason: failure.reason });
    throw failure;
  }
}
