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
    /** PostgreSQL's SQLSTATE, when the server (or the pooler) answered with one. */
    readonly sqlstate?: string,
  ) {
    super(`${dependency} ${reason}: ${detail}${sqlstate ? ` (SQLSTATE ${sqlstate} ${sqlstateClassOf(sqlstate)})` : ''}`);
  }

  /** What a log line says of this failure: never a value, never a server's message text. */
  get logFields(): { dependency: string; reason: DependencyFailure; cause: string; sqlstate?: string; sqlstateClass?: string } {
    return { dependency: this.dependency, reason: this.reason, cause: this.message, ...sqlstateFields(this) };
  }

  /** `<dependency>:<error class>`, as kept in pending_disables.last_error. */
  get summary(): string {
    return `${this.dependency}:${this.reason}`;
  }
}

/** A PostgreSQL failure's SQLSTATE and the condition name of its class, for a log line; nothing for any other error. */
export function sqlstateFields(error: unknown): { sqlstate?: string; sqlstateClass?: string } {
  const sqlstate = error instanceof DependencyError ? error.sqlstate : undefined;
  return sqlstate ? { sqlstate, sqlstateClass: sqlstateClassOf(sqlstate) } : {};
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

/** PostgreSQL's classes of SQLSTATE (the first two characters), by their condition names. */
const sqlstateClasses: Record<string, string> = {
  '00': 'successful_completion',
  '01': 'warning',
  '02': 'no_data',
  '03': 'sql_statement_not_yet_complete',
  '08': 'connection_exception',
  '09': 'triggered_action_exception',
  '0A': 'feature_not_supported',
  '0B': 'invalid_transaction_initiation',
  '0F': 'locator_exception',
  '0L': 'invalid_grantor',
  '0P': 'invalid_role_specification',
  '0Z': 'diagnostics_exception',
  '20': 'case_not_found',
  '21': 'cardinality_violation',
  '22': 'data_exception',
  '23': 'integrity_constraint_violation',
  '24': 'invalid_cursor_state',
  '25': 'invalid_transaction_state',
  '26': 'invalid_sql_statement_name',
  '27': 'triggered_data_change_violation',
  '28': 'invalid_authorization_specification',
  '2B': 'dependent_privilege_descriptors_still_exist',
  '2D': 'invalid_transaction_termination',
  '2F': 'sql_routine_exception',
  '34': 'invalid_cursor_name',
  '38': 'external_routine_exception',
  '39': 'external_routine_invocation_exception',
  '3B': 'savepoint_exception',
  '3D': 'invalid_catalog_name',
  '3F': 'invalid_schema_name',
  '40': 'transaction_rollback',
  '42': 'syntax_error_or_access_rule_violation',
  '44': 'with_check_option_violation',
  '53': 'insufficient_resources',
  '54': 'program_limit_exceeded',
  '55': 'object_not_in_prerequisite_state',
  '57': 'operator_intervention',
  '58': 'system_error',
  '72': 'snapshot_too_old',
  F0: 'config_file_error',
  HV: 'fdw_error',
  P0: 'plpgsql_error',
  XX: 'internal_error',
};

/** The condition name of a SQLSTATE's class ("operator_intervention" for 57014); "other" when unknown. */
function sqlstateClassOf(sqlstate: string): string {
  return sqlstateClasses[sqlstate.slice(0, 2)] ?? 'other';
}
