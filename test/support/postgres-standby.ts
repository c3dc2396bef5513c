import { execFile } from 'node:child_process';
import { chownSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from './process.js';
import { waitFor } from './wait.js';

const run = promisify(execFile);
const bin = process.env.TEST_POSTGRES_BIN ?? '/usr/lib/postgresql/15/bin';

/**
 * initdb, postgres and pg_ctl refuse to run as root: as root, they run as the `postgres` user
 * (the owner of the temporary folder), otherwise as whoever runs the tests.
 */
function command(tool: string, args: string[]): [string, string[]] {
  const path = join(bin, tool);
  return process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', path, ...args]] : [path, args];
}

async function tool(name: string, args: string[]): Promise<string> {
  const [file, argv] = command(name, args);
  const { stdout } = await run(file, argv, { cwd: '/', timeout: 30_000 });
  return stdout;
}

function ownedTemporaryFolder(): string {
  const dir = mkdtempSync(join(tmpdir(), 'pas-pg-failover-'));
  if (process.getuid?.() === 0) {
    const { uid, gid } = postgresIds();
    chownSync(dir, uid, gid);
  }
  return dir;
}

function postgresIds(): { uid: number; gid: number } {
  const entry = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((line) => line.startsWith('postgres:'));
  if (!entry) throw new Error('no postgres user to run the test servers as');
  const [, , uid, gid] = entry.split(':');
  return { uid: Number(uid), gid: Number(gid) };
}

/**
 * A PostgreSQL primary of its own (initdb in a temporary folder, on a free port, wal_level
 * replica, replication allowed from 127.0.0.1) and a streaming standby of it made with
 * `pg_basebackup -R`, on another free port: the two servers of a failover. `demotePrimary()` leaves
 * the old primary running and reachable but read-only for every session, as a demoted primary or an
 * Aurora-style failover leaves it; `promoteStandby()` makes the standby the new primary. close()
 * stops both and removes the folder.
 */
export async function startPrimaryWithStandby() {
  const dir = ownedTemporaryFolder();
  const primary = { dataDir: join(dir, 'primary'), port: await freePort() };
  const standby = { dataDir: join(dir, 'standby'), port: await freePort() };
  const started: string[] = [];
  const start = async (server: { dataDir: string; port: number }) => {
    const options = `-p ${server.port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c wal_level=replica -c max_wal_senders=4`;
    await tool('pg_ctl', ['-D', server.dataDir, '-l', `${server.dataDir}.log`, '-o', options, '-w', '-t', '30', 'start']);
    started.push(server.dataDir);
  };
  const url = (port: number) => `postgres://postgres@127.0.0.1:${port}/postgres`;
  const client = async (port: number) => {
    const connection = new pg.Client({ connectionString: url(port) });
    connection.on('error', () => undefined);
    await connection.connect();
    return connection;
  };
  const query = async <T extends pg.QueryResultRow>(port: number, text: string): Promise<T[]> => {
    const connection = await client(port);
    try {
      return (await connection.query<T>(text)).rows;
    } finally {
      await connection.end();
    }
  };

  try {
    // initdb's pg_hba.conf trusts local and 127.0.0.1 connections, replication ones included.
    await tool('initdb', ['-D', primary.dataDir, '-U', 'postgres', '-A', 'trust', '--no-sync', '-E', 'UTF8']);
    await start(primary);
  } catch (error) {
    await stopAll();
    throw error;
  }

  async function stopAll() {
    for (const dataDir of started.splice(0)) {
      await tool('pg_ctl', ['-D', dataDir, '-m', 'immediate', '-w', 'stop']).catch(() => undefined);
    }
    rmSync(dir, { recursive: true, force: true });
  }

  return {
    primary: { port: primary.port, url: url(primary.port) },
    standby: { port: standby.port, url: url(standby.port) },
    /** A connection straight to one server (the caller ends it). */
    client,
    query,
    /** The standby, from a base backup of the primary as it is now (schema and rows included). */
    async startStandby() {
      await tool('pg_basebackup', [
        '-h',
        '127.0.0.1',
        '-p',
        String(primary.port),
        '-U',
        'postgres',
        '-D',
        standby.dataDir,
        '-R',
        '-X',
        'stream',
        '-c',
        'fast',
        '--no-sync',
      ]);
      await start(standby);
    },
    /** The old primary answers every session as read-only (25006 on any write) and stays up. */
    async demotePrimary() {
      await query(primary.port, 'ALTER SYSTEM SET default_transaction_read_only = on');
      await query(primary.port, 'SELECT pg_reload_conf()');
    },
    /** Waits for the standby to replay everything the old primary wrote, then promotes it. */
    async promoteStandby() {
      const [current] = await query<{ lsn: string }>(primary.port, 'SELECT pg_current_wal_lsn()::text AS lsn');
      await waitFor(
        async () =>
          (
            await query<{ caught_up: boolean }>(standby.port, `SELECT pg_last_wal_replay_lsn() >= '${current?.lsn}'::pg_lsn AS caught_up`)
          )[0]?.caught_up,
        { timeoutMs: 10_000, intervalMs: 50, failure: 'the standby did not replay the primary' },
      );
      await tool('pg_ctl', ['-D', standby.dataDir, '-w', '-t', '30', 'promote']);
    },
    close: stopAll,
  };
}

export type PrimaryWithStandby = Awaited<ReturnType<typeof startPrimaryWithStandby>>;
