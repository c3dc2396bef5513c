import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { migrate } from '../src/db/migrate.js';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
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
 * The integration project's set-up (vitest.config.ts): builds dist/ and makes one database and one
 * Redis key prefix per test run, so concurrent runs never collide. The unit and chart projects need
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
  project.provide('databaseUrl', databaseUrl);
  project.provide('databaseAdminUrl', adminUrl);
  project.provide('redisUrl', redisUrl);
  project.provide('redisKeyPrefix', redisKeyPrefix);

  return async () => {
    const cleanup = new pg.Client({ connectionString: adminUrl });
    await cleanup.connect();
    await cleanup.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
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
