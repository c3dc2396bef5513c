/**
 * A dependency (spend management, Redis, PostgreSQL) failed or its breaker is open. Carries only
 * what is safe to log: which dependency, what kind of failure, an HTTP status or error code. The
 * original error (a got error holds the request's headers, the bearer token among them) is not
 * kept, so nothing secret can reach a log line or an error body through it.
 */
export class DependencyError extends Error {
  override readonly name = 'DependencyError';
  constructor(
    readonly dependency: 'spend_management' | 'redis' | 'postgres',
    readonly reason: 'breaker_open' | 'timeout' | 'bad_response' | 'unavailable',
    detail: string,
    /** The HTTP status a dependency answered with, when it answered. */
    readonly status?: number,
  ) {
    super(`${dependency} ${reason}: ${detail}`);
  }
}
