import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import Postgrator from 'postgrator';

const migrationsDir = fileURLToPath(new URL('./migrations/', import.meta.url));
// Arbitrary constant: serialises migrators (several pods, a Helm hook and a developer) on one database.
const migrationLockId = 727_274_001;

export interface MigrationOutcome {
  applied: string[];
  version: number;
}

/**
 * Applies the numbered SQL files of src/db/migrations to the database, idempotently. Each file runs
 * as one simple-protocol query, which PostgreSQL executes atomically; an advisory lock keeps two
 * migrators from racing.
 */
export async function migrate(databaseUrl: string): Promise<MigrationOutcome> {
  const client = new pg.Client({ connectionString: databaseUrl, application_name: 'partner-agent-status-migrate' });
  await client.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [migrationLockId]);
    const postgrator = new Postgrator({
      migrationPattern: `${migrationsDir}*.sql`,
      driver: 'pg',
      schemaTable: 'partner_agent_status_schema_version',
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
