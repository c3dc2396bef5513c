import { execFile } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
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
const migrationsDir = `${root}src/db/migrations/`;
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

/** `npm run migrate` with only DATABASE_URL set (or the variables given); its stdout line. */
async function migrateCommand(env: Record<string, string> = { DATABASE_URL: databaseUrl }): Promise<string> {
  const { stdout } = await run('npm', ['run', '--silent', 'migrate'], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
  });
  return stdout.trim();
}

async function schemaSnapshot(): Promise<{ versions: string[]; objects: string[] }> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const versions = await client.query<{ version: string }>(
      'SELECT version::text FROM partner_agent_status_schema_version ORDER BY version::bigint',
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

describe('MIGRATION_DATABASE_URL', () => {
  it('is where the migrator connects when set, whatever DATABASE_URL names (a pooler the migrator must not use)', async () => {
    const unreachable = new URL(databaseUrl);
    unreachable.port = '1';
    expect(await migrateCommand({ DATABASE_URL: unreachable.toString(), MIGRATION_DATABASE_URL: databaseUrl })).toMatch(
      /^(applied .*; schema version|schema up to date at version) \d+$/,
    );
    await expect(migrateCommand({ DATABASE_URL: unreachable.toString() })).rejects.toThrow(/migration failed/);
  });
});

describe('migrations on a live database', () => {
  it('accepts the released checksums of files revised since (a database migrated before they changed)', async () => {
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    try {
      // As a database migrated by the first releases of 001-004 records them.
      const released: Record<number, string> = {
        1: '53a4d6701bfc0b6d0b45f51572ae2042',
        2: '199760d7b88d27eeef84b26193ea7584',
        3: '9c955bc10468284a73712f108346f474',
        4: '4262440d51c83ebf8268c5cd1a8c10ea',
      };
      for (const [version, md5] of Object.entries(released)) {
        await client.query('UPDATE partner_agent_status_schema_version SET md5 = $1 WHERE version = $2', [md5, Number(version)]);
      }
      expect(await migrateCommand()).toMatch(/^schema up to date at version \d+$/);
      const { rows } = await client.query('SELECT md5 FROM partner_agent_status_schema_version WHERE version = 1');
      expect(rows[0].md5).not.toBe(released[1]);
      // Any other checksum is still refused.
      await client.query("UPDATE partner_agent_status_schema_version SET md5 = 'f00' WHERE version = 2");
      await expect(migrateCommand()).rejects.toThrow(/checksum/i);
      await client.query('UPDATE partner_agent_status_schema_version SET md5 = $1 WHERE version = 2', [released[2]]);
      expect(await migrateCommand()).toMatch(/^schema up to date/);
    } finally {
      await client.end();
    }
  });

  it('waits at most its lock_timeout behind a platform transaction, fails, and succeeds once it ends, leaving no invalid index', async () => {
    const { migrate } = await import('../../src/db/migrate.js');
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    try {
      // Undo the last index migration, then hold a write on campaigns open, as the platform would.
      await client.query('DROP INDEX campaigns_agent_unpaused_idx');
      await client.query('DELETE FROM partner_agent_status_schema_version WHERE version >= 7');
      await client.query('BEGIN');
      await client.query("INSERT INTO networks (network_id) VALUES ('00000000-0000-4000-8000-000000000001') ON CONFLICT DO NOTHING");
      await client.query('LOCK TABLE campaigns IN ROW EXCLUSIVE MODE');
      const started = Date.now();
      await expect(migrate(databaseUrl, { lockTimeoutMs: 300, attempts: 1 })).rejects.toMatchObject({ code: '55P03' });
      expect(Date.now() - started).toBeLessThan(5_000);
      await client.query('COMMIT');
      const outcome = await migrate(databaseUrl, { lockTimeoutMs: 300, attempts: 3, retryDelayMs: 100 });
      expect(outcome.applied).toEqual(
        readdirSync(migrationsDir)
          .filter((file) => file >= '007')
          .sort(),
      );
      const invalid = await client.query('SELECT count(*)::int AS n FROM pg_index WHERE NOT indisvalid');
      expect(invalid.rows[0].n).toBe(0);
      const index = await client.query("SELECT 1 FROM pg_indexes WHERE indexname = 'campaigns_agent_unpaused_idx'");
      expect(index.rowCount).toBe(1);
    } finally {
      await client.query('ROLLBACK').catch(() => undefined);
      await client.end();
    }
  });

  it("numbers each agent's changes written before 011 (012's backfill), with or without a change of the agent in between", async () => {
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    try {
      const network = randomUUID();
      const [x, y] = [`us-east-1:${randomUUID()}`, `us-east-1:${randomUUID()}`];
      await client.query('INSERT INTO networks (network_id) VALUES ($1)', [network]);
      await client.query('INSERT INTO agents (agent_id, network_id) VALUES ($1, $3), ($2, $3)', [x, y, network]);
      const change = (agentId: string) =>
        client.query(`INSERT INTO agent_status_changes (agent_id, network_id, enabled, partner_name) VALUES ($1, $2, true, 'm')`, [
          agentId,
          network,
        ]);
      // Rows as the release before 011 wrote them: no number, interleaved between the agents.
      await client.query('ALTER TABLE agent_status_changes DISABLE TRIGGER agent_status_changes_number');
      for (const agentId of [x, y, x, y, x]) await change(agentId);
      await client.query('ALTER TABLE agent_status_changes ENABLE TRIGGER agent_status_changes_number');
      // A change of y after 011, before 012 ran: it counts y's older rows.
      await change(y);
      await client.query(readFileSync(`${migrationsDir}012.do.sql`, 'utf8'));
      await change(x);
      const numbers = async (agentId: string) =>
        (
          await client.query('SELECT agent_seq::int AS n FROM agent_status_changes WHERE agent_id = $1 ORDER BY change_id', [agentId])
        ).rows.map((row) => row.n);
      expect(await numbers(x)).toEqual([1, 2, 3, 4]);
      expect(await numbers(y)).toEqual([1, 2, 3]);
      const counters = await client.query(
        'SELECT agent_id, last_seq::int AS n FROM agent_change_counters WHERE agent_id = ANY($1) ORDER BY n',
        [[x, y]],
      );
      expect(counters.rows).toEqual([
        { agent_id: y, n: 3 },
        { agent_id: x, n: 4 },
      ]);
    } finally {
      await client.end();
    }
  });

  it('hashes the Idempotency-Keys written before 014 as the service does, once, and counts them per network', async () => {
    const { idempotencyKeyDigest } = await import('../../src/stores/idempotency-keys.js');
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    try {
      const network = randomUUID();
      await client.query(
        `INSERT INTO idempotency_keys (network_id, idempotency_key, agent_id, enabled, state)
         VALUES ($1, 'plain-1', 'us-east-1:x', true, 'done'), ($1, 'Bearer something', 'us-east-1:x', true, 'done')`,
        [network],
      );
      const migration = readFileSync(`${migrationsDir}014.do.sql`, 'utf8');
      await client.query(migration);
      await client.query(migration);
      const { rows } = await client.query('SELECT idempotency_key FROM idempotency_keys WHERE network_id = $1 ORDER BY 1', [network]);
      expect(rows.map((row) => row.idempotency_key)).toEqual(
        [idempotencyKeyDigest(network, 'plain-1'), idempotencyKeyDigest(network, 'Bearer something')].sort(),
      );
      const counts = await client.query('SELECT live FROM idempotency_key_counts WHERE network_id = $1', [network]);
      expect(counts.rows).toEqual([{ live: 2 }]);
    } finally {
      await client.end();
    }
  });
});
