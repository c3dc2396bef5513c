// What a PostgreSQL failure is called in metrics, logs and pending_disables.last_error: slonik 49's
// errors carry neither name nor code where one would look, so each class is checked against the
// real server.

import { createPgDriverFactory } from '@slonik/pg-driver';
import pg from 'pg';
import { createPool, type DatabasePool, sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { failoverReasonOf } from '../../src/stores/database-failover.js';
import { classifyPostgresError, createDatabasePool } from '../../src/stores/postgres.js';
import { databaseUrl } from '../support/database-url.js';
import { freePort } from '../support/process.js';
import { waitFor } from '../support/wait.js';

let pool: DatabasePool;
const admin = new pg.Pool({ connectionString: databaseUrl(), max: 2 });

beforeAll(async () => {
  pool = await createDatabasePool({ url: databaseUrl(), maxPoolSize: 2, statementTimeoutMs: 300 });
  await admin.query('CREATE TABLE IF NOT EXISTS classify_probe (id int PRIMARY KEY)');
  await admin.query('INSERT INTO classify_probe VALUES (1) ON CONFLICT DO NOTHING');
});

afterAll(async () => {
  await pool?.end();
  await admin.end();
});

const failure = (run: () => Promise<unknown>) =>
  run().then(
    () => {
      throw new Error('the statement did not fail');
    },
    (error: unknown) => classifyPostgresError(error),
  );

describe('classifyPostgresError against the real server', () => {
  it('a statement timeout (57014) is timeout', async () => {
    expect(await failure(() => pool.query(sql.unsafe`SELECT pg_sleep(2)`))).toBe('timeout');
  });

  it('a unique violation (23505) and a raised restriction (P0001) are constraint', async () => {
    expect(await failure(() => pool.query(sql.unsafe`INSERT INTO classify_probe VALUES (1)`))).toBe('constraint');
    expect(await failure(() => pool.query(sql.unsafe`DO $$ BEGIN RAISE EXCEPTION 'restricted' USING ERRCODE = 'P0001'; END $$`))).toBe(
      'constraint',
    );
  });

  it('a statement timeout, a constraint and a division by zero say nothing about the server (no failover)', async () => {
    for (const statement of [sql.unsafe`SELECT pg_sleep(2)`, sql.unsafe`INSERT INTO classify_probe VALUES (1)`, sql.unsafe`SELECT 1/0`]) {
      const error = await pool.query(statement).catch((caught: unknown) => caught);
      expect(failoverReasonOf(error)).toBeUndefined();
    }
  });

  it('a lock not granted at once (55P03) is busy', async () => {
    const holder = await admin.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM classify_probe WHERE id = 1 FOR UPDATE');
      expect(await failure(() => pool.query(sql.unsafe`SELECT 1 FROM classify_probe WHERE id = 1 FOR UPDATE NOWAIT`))).toBe('busy');
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
  });

  it('a read-only server (25006, an old primary after a failover) is unavailable', async () => {
    const url = new URL(databaseUrl());
    url.searchParams.set('options', '-c default_transaction_read_only=on');
    const readOnly = await createDatabasePool({ url: url.toString(), maxPoolSize: 1, statementTimeoutMs: 1_000 });
    try {
      const refused = await readOnly.query(sql.unsafe`INSERT INTO classify_probe VALUES (2)`).catch((error: unknown) => error);
      expect(classifyPostgresError(refused)).toBe('unavailable');
      // …and the replica leaves that server (docs/interfaces.md §13).
      expect(failoverReasonOf(refused)).toEqual({ reason: 'read_only', code: '25006' });
    } finally {
      await readOnly.end();
    }
  });

  it('a terminated backend (57P01) and a refused connection are unavailable', async () => {
    const victim = await createPool(databaseUrl(), { driverFactory: createPgDriverFactory(), maxPoolSize: 1, queryRetryLimit: 0 });
    try {
      const pid = await victim.oneFirst(sql.unsafe`SELECT pg_backend_pid() AS pid`);
      // The failure is caught as the query is sent: the termination's error and the admin's answer
      // can come back in the same turn of the event loop, and a handler attached only after the
      // admin's answer left the rejection unhandled for that turn (vitest failed the run on it).
      const sleeping = victim.query(sql.unsafe`SELECT pg_sleep(5)`).then(
        () => new Error('the sleeping query was not terminated'),
        (error: unknown) => error,
      );
      // Terminated while the query runs, never before it started (a fixed pause did that on a busy
      // machine: the idle connection's end then surfaced as an unhandled rejection of the pool).
      await waitFor(
        async () => {
          const { rows } = await admin.query(
            "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE '%pg_sleep%'",
            [pid],
          );
          return rows.length === 1;
        },
        { timeoutMs: 10_000, intervalMs: 20, failure: 'the sleeping query never started' },
      );
      await admin.query('SELECT pg_terminate_backend($1)', [pid]);
      const terminated = await sleeping;
      expect(classifyPostgresError(terminated)).toBe('unavailable');
      expect(failoverReasonOf(terminated)).toEqual({ reason: 'terminated', code: '57P01' });
    } finally {
      await victim.end();
    }
    const nowhere = new URL(databaseUrl());
    nowhere.port = String(await freePort());
    // createPool connects once: the refusal surfaces there.
    expect(await failure(() => createDatabasePool({ url: nowhere.toString(), maxPoolSize: 1, statementTimeoutMs: 1_000 }))).toBe(
      'unavailable',
    );
  });

  it("the client's own read time-out (a connection that stopped answering) is timeout", () => {
    expect(classifyPostgresError(new Error('Query read timeout'))).toBe('timeout');
    expect(failoverReasonOf(new Error('Query read timeout'))?.reason).toBe('connection_lost');
  });
});
