// The setting of the tests that check statement plans: generic plans from the first run, a database
// skewed as the benchmark's, and the scan counters that tell an index read from a sequential one.
import { type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import type { TestDatabase } from './data.js';
import { databaseUrl } from './database-url.js';

const scans = z.object({ seq_scan: z.coerce.number(), idx_scan: z.coerce.number() });

/** The table's scan counters, after this connection's own counts are flushed (before its ReadyForQuery). */
export async function scansOf(pool: DatabasePool, table: string): Promise<z.infer<typeof scans>> {
  await pool.query(sql.unsafe`SELECT pg_stat_force_next_flush()`);
  return pool.one(
    sql.type(scans)`SELECT seq_scan::int, coalesce(idx_scan, 0)::int AS idx_scan FROM pg_stat_user_tables WHERE relname = ${table}`,
  );
}

/**
 * Forces generic plans on the file's database (for connections opened afterwards) and seeds the
 * benchmark's skew in the network: one agent of 3,000 campaigns beside 20 of 10. Returns the
 * database's URL, for a pool of the statements under test.
 */
export async function genericPlansBesideSkew(db: TestDatabase, networkId: string): Promise<URL> {
  const url = new URL(databaseUrl());
  await db.pool.query(`ALTER DATABASE ${url.pathname.slice(1)} SET plan_cache_mode = force_generic_plan`);
  await db.campaigns(await db.agent(networkId), 3_000);
  for (let i = 0; i < 20; i++) await db.campaigns(await db.agent(networkId), 10);
  await db.pool.query('ANALYZE agents, campaigns');
  return url;
}
