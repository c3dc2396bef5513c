import { createPgDriverFactory } from '@slonik/pg-driver';
import pg from 'pg';
import {
  BackendTerminatedError,
  ConnectionError,
  createPool,
  type DatabasePool,
  IntegrityConstraintViolationError,
  StatementTimeoutError,
  sql,
} from 'slonik';
import { type DatabasePooler, statementClientMarginMs } from '../config.js';
import { DependencyError, type DependencyFailure, timedCall } from '../observability/dependency-calls.js';
import type { Metrics } from '../observability/metrics.js';
import { ServerFailover } from './database-failover.js';
import { gatedPool } from './pool-wait.js';

// PostgreSQL as every store of src/stores meets it: the pool (direct, or behind a transaction
// pooler), the one timing wrapper of its statements with the classification of its errors, and
// the fragments several stores' statements share.

export interface PoolOptions {
  url: string;
  maxPoolSize: number;
  statementTimeoutMs: number;
  /** DATABASE_IDLE_TIMEOUT_MS: an unused connection is closed after this long (default 60 s). */
  idleTimeoutMs?: number;
  /** Shared by the replica's pools, so that a failover seen in one retires the old server's connections in all (default: this pool's own). */
  failover?: ServerFailover;
  /**
   * `transaction` (DATABASE_POOLER): no session setting is sent; statement_timeout and
   * idle_in_transaction_session_timeout come from the role's own settings (docs/interfaces.md §13).
   */
  pooler?: DatabasePooler;
  /**
   * How long a statement waits for one of this pool's connections at most (default: the statement's
   * own bound, statement_timeout + the client margin); a nearer bound set by the caller
   * (waitingUntil) wins. Past it the statement fails with PoolWaitExceeded, never sent.
   */
  maxWaitMs?: number;
  /** The pool's name in a wait failure's message. */
  name?: string;
}

/**
 * A slonik pool tuned for a hot path of single autocommit statements:
 * - no `DISCARD ALL` on release (slonik's default reset): this service sets no session state, and
 *   the reset costs a round trip per checkout, about half the throughput on `SELECT 1`;
 * - connections stay open for 60 s idle (DATABASE_IDLE_TIMEOUT_MS) rather than 5 s, so bursts do not
 *   pay for reconnecting;
 * - no transaction is used at all (every write is one statement), and slonik's query and
 *   transaction retries are off: nothing here may run twice behind the caller's back;
 * - every statement is bounded on the client side too, at statement_timeout + a margin: only a
 *   connection that stopped answering (a failover without a reset, a hung proxy) trips it, and
 *   slonik then destroys that connection. slonik 49's pg driver
 *   passes no client-side limit to node-postgres, so it goes through pg.defaults.query_timeout,
 *   which every pg Client of this process reads: the service's only pg clients are these pools
 *   (the migrator sets its own session limits);
 * - a statement waits for a free connection at most `maxWaitMs` (src/stores/pool-wait.ts): slonik's
 *   own queue has no limit;
 * - a connection whose server turned out gone or read-only (25006, 57P01-57P03, a lost connection)
 *   is never reused, and every connection opened before it is retired (src/stores/database-failover.ts).
 * Behind a pooler in transaction mode (`pooler: 'transaction'`) the connection is PgBouncer's and its
 * session is nobody's: slonik's statement_timeout and idle_in_transaction_session_timeout, sent as
 * startup parameters, would be refused by PgBouncer (or dropped, when it is told to ignore them), so
 * none is sent; the server-side bounds are the role's (ALTER ROLE … SET, docs/operations.md), and
 * the client-side bound stays.
 */
export async function createDatabasePool(options: PoolOptions): Promise<DatabasePool> {
  pg.defaults.query_timeout = options.statementTimeoutMs + statementClientMarginMs;
  const sessionTimeout = (options.pooler ?? 'none') === 'none' ? options.statementTimeoutMs : 'DISABLE_TIMEOUT';
  const pool = await createPool(options.url, {
    driverFactory: (options.failover ?? new ServerFailover()).wrap(createPgDriverFactory()),
    maxPoolSize: options.maxPoolSize,
    statementTimeout: sessionTimeout,
    idleInTransactionSessionTimeout: sessionTimeout,
    idleTimeout: options.idleTimeoutMs ?? 60_000,
    connectionTimeout: 2_000,
    queryRetryLimit: 0,
    transactionRetryLimit: 0,
    resetConnection: async () => {},
  });
  const maxWaitMs = options.maxWaitMs ?? options.statementTimeoutMs + statementClientMarginMs;
  return gatedPool(pool, options.name ?? 'database', options.maxPoolSize, maxWaitMs);
}

/**
 * What a PostgreSQL error says about the database (never about a row), for metrics, logs,
 * pending_disables.last_error and the 500's wording. slonik 49's errors carry neither a `name`
 * nor a `code` of their own: the class tells some, the SQLSTATE is on the error or its cause.
 */
export function classifyPostgresError(error: unknown): DependencyFailure {
  if (error instanceof StatementTimeoutError) return 'timeout';
  if (error instanceof IntegrityConstraintViolationError) return 'constraint';
  if (error instanceof BackendTerminatedError) return 'unavailable';
  const sqlstate = codeOf(error);
  const message = (error as Error).message ?? '';
  if (sqlstate === '57014' || /query read timeout/i.test(message)) return 'timeout';
  if (sqlstate === '55P03' || sqlstate === '40001' || sqlstate === '40P01') return 'busy';
  if (sqlstate.startsWith('23') || sqlstate === 'P0001') return 'constraint';
  if (
    error instanceof ConnectionError ||
    /^(08|53|57P0[1-3]|25006)/.test(sqlstate) ||
    /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|EHOSTUNREACH)$/.test(sqlstate) ||
    /terminat|connect/i.test(message)
  ) {
    return 'unavailable';
  }
  return 'error';
}

/** The error's code: a SQLSTATE, or a socket's (ECONNRESET); on the error or on its cause (slonik wraps pg's). */
function codeOf(error: unknown): string {
  return String((error as { code?: unknown }).code ?? (error as { cause?: { code?: unknown } }).cause?.code ?? '');
}

/**
 * The SQLSTATE of a PostgreSQL error (the server's or the pooler's), if it has one: five characters
 * whose class is a digit pair or F0, HV, P0, XX; never a socket's code (ECONNRESET, EPIPE).
 */
function sqlstateOf(error: unknown): string | undefined {
  const code = codeOf(error);
  return /^([0-9][0-9A-Z]|F0|HV|P0|XX)[0-9A-Z]{3}$/.test(code) ? code : undefined;
}

/**
 * The timing and error wrapper of every statement: PostgreSQL errors leave as DependencyError,
 * with their SQLSTATE (and so its class in the log), never the server's message text, which may
 * quote a value.
 */
export function postgresCall(metrics: Metrics) {
  return <T>(operation: string, run: () => Promise<T>) =>
    timedCall(
      metrics,
      'postgres',
      operation,
      run,
      (error) =>
        new DependencyError(
          'postgres',
          classifyPostgresError(error),
          `${operation}: ${(error as Error).constructor?.name ?? 'Error'}`,
          undefined,
          sqlstateOf(error),
        ),
    );
}

export const seconds = (ms: number) => sql.fragment`make_interval(secs => ${ms / 1000})`;

/**
 * The transaction-level advisory lock that serialises the changes of one agent (class 1885434739,
 * the agent id's hash): every statement that appends a change row takes it before the row gets its
 * id and holds it to its commit, so an agent's change ids and numbers (migration 011's trigger, in
 * the same statement) are committed in their order (the ETag, the latest number, only grows) and a
 * conditional change sees every change committed before it.
 * Nothing that holds it waits for anything else: an enable takes it only once it has the agent row.
 */
export const changeLock = (agentId: string | ReturnType<typeof sql.fragment>) =>
  sql.fragment`pg_advisory_xact_lock(1885434739, hashtext(${agentId}))`;
