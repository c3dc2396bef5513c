// `npm run migrate`: applies the migrations to DATABASE_URL. Exit 1 with one line on failure.
import { migrate } from './migrate.js';

const databaseUrl = process.env.DATABASE_URL?.trim();
if (!databaseUrl) {
  console.error('DATABASE_URL is required');
  process.exit(1);
}
try {
  const { applied, version } = await migrate(databaseUrl);
  console.log(applied.length ? `applied ${applied.join(', ')}; schema version ${version}` : `schema up to date at version ${version}`);
} catch (error) {
  console.error(`migration failed: ${(error as Error).message}`);
  process.exit(1);
}
