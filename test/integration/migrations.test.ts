import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';

/**
 * `npm run migrate` as operators and the chart's pre-install hook run it, against a database of
 * its own: the first run applies every migration, any later run applies nothing, and two runs at
 * once (two pods, or a hook and a developer) still apply each migration exactly once.
 */
const root = fileURLToPath(new URL('../..', import.meta.url));
const run = promisify(execFile);
const database = `pas_migrate_${randomBytes(4).toString('hex')}`;
let databaseUrl: string;

async function admin<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: inject('databaseAdminUrl') });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

beforeAll(async () => {
  await admin((client) => client.query(`CREATE DATABASE ${database}`));
  const url = new URL(inject('databaseAdminUrl'));
  url.pathname = `/${database}`;
  databaseUrl = url.toString();
});

afterAll(async () => {
  await admin((client) => client.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`));
});

/** `npm run migrate` with only DATABASE_URL set; its stdout line. */
async function migrateCommand(): Promise<string> {
  const { stdout } = await run('npm', ['run', '--silent', 'migrate'], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', DATABASE_URL: databaseUrl },
  });
  return stdout.trim();
}

async function schemaSnapshot(): Promise<{ versions: string[]; objects: string[] }> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const versions = await client.query<{ version: string }>(
      'SELECT version::text FROM partner_agent_status_schema_version ORDER BY version',
    );
    const objects = await client.query<{ name: string }>(
      `SELECT c.relkind::text || ':' || c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public'
       UNION ALL SELECT 'f:' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
       UNION ALL SELECT 't:' || t.tgname FROM pg_trigger t WHERE NOT t.tgisinternal
       ORDER BY 1`,
    );
    return { versions: versions.rows.map((r) => r.version), objects: objects.rows.map((r) => r.name) };
  } finally {
    await client.end();
  }
}

describe('npm run migrate', () => {
  it('applies every migration once, even when two run at once, and nothing on a later run', async () => {
    const outputs = await Promise.all([migrateCommand(), migrateCommand()]);
    const applying = outputs.filter((line) => line.startsWith('applied '));
    expect(applying, outputs.join('\n')).toHaveLength(1);
    expect(applying[0]).toMatch(/^applied 001\.do\.sql, 002\.do\.sql(, \d{3}\.do\.sql)*; schema version \d+$/);
    const version = /schema version (\d+)$/.exec(applying[0]!)![1];
    expect(outputs.filter((line) => line !== applying[0])).toEqual([`schema up to date at version ${version}`]);

    const first = await schemaSnapshot();
    expect(first.versions.at(-1)).toBe(version);
    expect(first.objects).toEqual(expect.arrayContaining(['r:agents', 'r:campaigns', 'r:networks', 'f:agent_is_restricted']));

    expect(await migrateCommand()).toBe(`schema up to date at version ${version}`);
    expect(await schemaSnapshot()).toEqual(first);
  });
});
