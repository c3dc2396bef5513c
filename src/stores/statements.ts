import { type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import type { DatabasePooler } from '../config.js';

/** How a hot statement is made: `statement('pas_…', parser)` followed by its SQL template. */
export type Statement = typeof sql.prepared;

/**
 * The statement maker, chosen once at start and handed to the repositories. Without a pooler a hot
 * statement is a named prepared statement, parsed and planned once per connection (the pool never
 * resets its connections, so they survive). Behind a pooler in transaction mode a name prepared on
 * one server connection is unknown on the next one (PgBouncer 1.18 does not track them), so every
 * statement is unnamed: parsed, bound and run in one round trip on whichever server connection
 * the pooler gives.
 */
export function statementsFor(pooler: DatabasePooler): Statement {
  if (pooler === 'none') return sql.prepared;
  return (_name, parser) => sql.type(parser);
}

const boundsRow = z.object({ statement_timeout: z.number(), idle_in_transaction_session_timeout: z.number() });

/** The server-side bounds a session of the service gets without setting anything (milliseconds; 0: none). */
export interface ServerBounds {
  statementTimeoutMs: number;
  idleInTransactionSessionTimeoutMs: number;
}

/**
 * Behind a pooler the service sets no session state, so its statements are bounded on the server
 * only by what the role (or the database) sets for every session: read once at start, through the
 * pooler, so that a missing `ALTER ROLE … SET statement_timeout` is said in the log
 * (docs/operations.md, "Behind PgBouncer").
 */
export async function serverBounds(pool: DatabasePool): Promise<ServerBounds> {
  const row = await pool.one(sql.type(boundsRow)`
    SELECT (extract(epoch FROM current_setting('statement_timeout')::interval) * 1000)::int AS statement_timeout,
           (extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval) * 1000)::int
             AS idle_in_transaction_session_timeout`);
  return { statementTimeoutMs: row.statement_timeout, idleInTransactionSessionTimeoutMs: row.idle_in_transaction_session_timeout };
}

/** Whether both bounds are set and no looser than DATABASE_STATEMENT_TIMEOUT_MS. */
export function boundedBy(bounds: ServerBounds, statementTimeoutMs: number): boolean {
  return [bounds.statementTimeoutMs, bounds.idleInTransactionSessionTimeoutMs].every((ms) => ms > 0 && ms <= statementTimeoutMs);
}
