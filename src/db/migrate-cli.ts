// `npm run migrate`: applies the migrations to MIGRATION_DATABASE_URL, or DATABASE_URL when it is
// not set. The migrator needs a direct connection (a session advisory lock, session settings, CREATE
// INDEX CONCURRENTLY): behind a pooler in transaction mode, MIGRATION_DATABASE_URL names the
// database itself (docs/interfaces.md §13). Exit 1 with one line on failure.
import { migrate } from './migrate.js';

const databaseUrl = process.env.MIGRATION_DATABASE_URL?.trim() || process.env.DATABASE_URL?.trim();
if (!databaseUrl) {
  console.error('MIGRATION_DATABASE_URL or DATABASE_URL is required');
  process.exit(1);
}
try {
  const { applied, version } = await migrate(databaseUrl);
  console.log(applied.length ? `applied ${applied.join(', ')}; schema version ${version}` : `schema up to date at version ${version}`);
} catch (error) {
  console.error(`migration failed: ${(error as Error).message}`);
  process.exit(1);
}
