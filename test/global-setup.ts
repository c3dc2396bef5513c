import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { migrate } from '../src/db/migrate.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The run's migrated database, used only as the template of each test file's own database. */
    databaseTemplate: string;
    /** The server's maintenance database, for tests that make a database of their own. */
    databaseAdminUrl: string;
    redisUrl: string;
    redisKeyPrefix: string;
  }
}

// The machine's real PostgreSQL and Redis (see README); overridable for other set-ups.
const adminUrl = process.env.TEST_DATABASE_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const redisUrl = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

/**
 * The integration project's set-up (vitest.config.ts): builds dist/ and makes one migrated database
 * and one Redis key prefix per test run, so concurrent runs never collide. Each test file then gets
 * a database of its own, copied from this one (test/support/file-database.ts): every replica runs
 * a convergence worker that claims any due pending disable in its database, so files sharing one
 * would finish each other's disables. The unit and chart projects need
 * neither and never run this.
 */
export default async function setup(project: TestProject) {
  // The process-level tests (tracing, drain) run the built service exactly as `npm start` does.
  if (process.env.TEST_SKIP_BUILD !== '1') execFileSync('npm', ['run', '--silent', 'build'], { stdio: 'inherit' });

  const runId = `${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
  const database = `pas_test_${runId}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${database}`);
  await admin.end();

  const url = new URL(adminUrl);
  url.pathname = `/${database}`;
  const databaseUrl = url.toString();
  await migrate(databaseUrl);

  const redisKeyPrefix = `pas-test:${runId}:`;
  project.provide('databaseTemplate', database);
  project.provide('databaseAdminUrl', adminUrl);
  project.provide('redisUrl', redisUrl);
  project.provide('redisKeyPrefix', redisKeyPrefix);

  return async () => {
    const cleanup = new pg.Client({ connectionString: adminUrl });
    await cleanup.connect();
    const { rows } = await cleanup.query('SELECT datname FROM pg_database WHERE datname LIKE $1', [`${database}%`]);
    for (const { datname } of rows) await cleanup.query(`DROP DATABASE IF EXISTS ${datname} WITH (FORCE)`);
    await cleanup.end();
    const redis = new Redis(redisUrl);
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${redisKeyPrefix}*`, 'COUNT', 1000);
      if (keys.length) await redis.del(...keys);
      cursor = next;
    } while (cursor !== '0');
    await redis.quit();
  };
}
