import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import Postgrator from 'postgrator';

const migrationsDir = fileURLToPath(new URL('./migrations/', import.meta.url));
// Arbitrary constant: serialises migrators (several pods, a Helm hook and a developer) on one database.
const migrationLockId = 727_274_001;
const schemaTable = 'partner_agent_status_schema_version';

/**
 * Files changed after they were released, with the checksum each had then: a database that ran the
 * old text gets the new checksum recorded (the changes are comments, a lock_timeout, and 001's
 * indexes moved to CONCURRENTLY migrations that find them built), instead of failing postgrator's
 * check. Nothing else in those files changed, so what the database holds is what they now say.
 */
const revisedFiles: Record<number, string[]> = {
  1: ['53a4d6701bfc0b6d0b45f51572ae2042'],
  2: ['199760d7b88d27eeef84b26193ea7584', '551365a85e188ffdd8cf4a72cb1e1a10'],
  3: ['9c955bc10468284a73712f108346f474'],
  4: ['4262440d51c83ebf8268c5cd1a8c10ea'],
};

/** Indexes built CONCURRENTLY by the migrations: an interrupted build leaves one invalid. */
const concurrentIndexes = [
  'campaigns_agent_unpaused_idx',
  'agents_network_idx',
  'agent_status_changes_agent_seq_idx',
  'webhook_deliveries_network_pending_idx',
];

export interface MigrationOptions {
  /** The longest a migration waits for one lock before it fails and is tried again. */
  lockTimeoutMs?: number;
  /** The longest one migration statement may run (an index build on a big table included). */
  statementTimeoutMs?: number;
  /** Whole attempts when a lock could not be had in time (SQLSTATE 55P03). */
  attempts?: number;
  retryDelayMs?: number;
}

export interface MigrationOutcome {
  applied: string[];
  version: number;
}

/**
 * Applies the numbered SQL files of src/db/migrations to the database, idempotently. Each file runs
 * as one simple-protocol query, which PostgreSQL executes atomically (a file holding only a
 * CREATE INDEX CONCURRENTLY runs outside any transaction); an advisory lock keeps two migrators from
 * racing. The platform's tables are live: the session waits at most `lockTimeoutMs` for any lock,
 * and a migration that could not get one is tried again whole, after a pause, up to `attempts`
 * times, so that it never queues the platform's writes behind it for long.
 */
export async function migrate(databaseUrl: string, options: MigrationOptions = {}): Promise<MigrationOutcome> {
  const attempts = options.attempts ?? 5;
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await migrateOnce(databaseUrl, options);
    } catch (error) {
      if ((error as { code?: string }).code !== '55P03' || attempt >= attempts) throw error;
      await new Promise((resolve) => setTimeout(resolve, options.retryDelayMs ?? 2_000));
    }
  }
}

async function migrateOnce(databaseUrl: string, options: MigrationOptions): Promise<MigrationOutcome> {
  const client = new pg.Client({ connectionString: databaseUrl, application_name: 'partner-agent-status-migrate' });
  await client.connect();
  try {
    await lockMigrations(client);
    await client.query(`SET lock_timeout = ${Math.trunc(options.lockTimeoutMs ?? 3_000)}`);
    await client.query(`SET statement_timeout = ${Math.trunc(options.statementTimeoutMs ?? 30 * 60_000)}`);
    await dropInvalidIndexes(client);
    await acceptRevisedFiles(client);
    const postgrator = new Postgrator({
      migrationPattern: `${migrationsDir}*.sql`,
      driver: 'pg',
      schemaTable,
      execQuery: (query) => client.query(query),
    });
    const applied = await postgrator.migrate();
    const version = Number(await postgrator.getDatabaseVersion());
    return { applied: applied.map((m) => basename(m.filename)), version };
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [migrationLockId]).catch(() => undefined);
    await client.end();
  }
}

/**
 * Takes the migrators' advisory lock by polling pg_try_advisory_lock, never by waiting in
 * pg_advisory_lock: a CREATE INDEX CONCURRENTLY waits for every transaction older than it to end,
 * and a second migrator waiting for the lock inside a statement would be one (a deadlock).
 */
async function lockMigrations(client: pg.Client): Promise<void> {
  for (;;) {
    const { rows } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [migrationLockId]);
    if (rows[0]?.locked) return;
    await new Promise((resolve) => setTimeout(resolve, 100 + Math.random() * 100));
  }
}

/** A CREATE INDEX CONCURRENTLY that failed half way leaves an invalid index that IF NOT EXISTS would keep. */
async function dropInvalidIndexes(client: pg.Client): Promise<void> {
  const { rows } = await client.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
      WHERE NOT i.indisvalid AND c.relname = ANY($1::text[]) AND pg_catalog.pg_table_is_visible(c.oid)`,
    [concurrentIndexes],
  );
  for (const { name } of rows) await client.query(`DROP INDEX CONCURRENTLY IF EXISTS ${pg.escapeIdentifier(name)}`);
}

async function acceptRevisedFiles(client: pg.Client): Promise<void> {
  const { rows } = await client.query<{ present: boolean }>('SELECT to_regclass($1) IS NOT NULL AS present', [schemaTable]);
  if (!rows[0]?.present) return;
  // postgrator's checksum: the MD5 of the file's text as it is.
  const fileChecksum = (file: string) => createHash('md5').update(readFileSync(file, 'utf8'), 'utf8').digest('hex');
  for (const [version, oldSums] of Object.entries(revisedFiles)) {
    const file = `${migrationsDir}${String(version).padStart(3, '0')}.do.sql`;
    await client.query(`UPDATE ${pg.escapeIdentifier(schemaTable)} SET md5 = $1 WHERE version = $2 AND md5 = ANY($3::text[])`, [
      fileChecksum(file),
      Number(version),
      oldSums,
    ]);
  }
}
