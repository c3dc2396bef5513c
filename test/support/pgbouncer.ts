import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { freePort } from './process.js';
import { waitFor } from './wait.js';

export interface PgBouncerOptions {
  /** Server connections per database and user pair: small, so that clients really share them. */
  poolSize?: number;
  /**
   * Startup parameters PgBouncer drops instead of refusing the connection. Empty by default: a
   * client that sends session settings in its startup packet (slonik's statement_timeout) is refused.
   */
  ignoreStartupParameters?: string[];
  /** PgBouncer's own query_timeout in seconds (0: none). */
  queryTimeoutSeconds?: number;
}

/**
 * Debian's PgBouncer (/usr/sbin/pgbouncer, 1.18 on Debian 12: no protocol-level prepared
 * statements) in transaction pooling mode on a free port, in front of the test file's database
 * (`databaseUrl`, trust auth). Its ini, auth file and log live in a temporary folder removed by
 * close(). It refuses to run as root, so it drops to the postgres user (`-u`). `url` is the
 * database's URL through PgBouncer.
 */
export async function startPgBouncer(databaseUrl: string, options: PgBouncerOptions = {}) {
  const target = new URL(databaseUrl);
  const database = target.pathname.slice(1);
  const user = decodeURIComponent(target.username) || 'postgres';
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'pas-pgbouncer-'));
  chmodSync(dir, 0o777);
  const ini = join(dir, 'pgbouncer.ini');
  const authFile = join(dir, 'userlist.txt');
  const logFile = join(dir, 'pgbouncer.log');
  writeFileSync(authFile, `"${user}" ""\n`);
  writeFileSync(
    ini,
    [
      '[databases]',
      `${database} = host=${target.hostname} port=${target.port || 5432} dbname=${database} user=${user}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${authFile}`,
      'pool_mode = transaction',
      `default_pool_size = ${options.poolSize ?? 4}`,
      'min_pool_size = 0',
      'reserve_pool_size = 0',
      'max_client_conn = 500',
      'max_db_connections = 0',
      `ignore_startup_parameters = ${(options.ignoreStartupParameters ?? []).join(',')}`,
      `query_timeout = ${options.queryTimeoutSeconds ?? 0}`,
      'server_lifetime = 3600',
      'server_idle_timeout = 600',
      `logfile = ${logFile}`,
      'log_connections = 0',
      'log_disconnections = 0',
      'admin_users = postgres',
      '',
    ].join('\n'),
  );
  for (const file of [ini, authFile]) chmodSync(file, 0o644);
  const asRoot = process.getuid?.() === 0;
  const child: ChildProcess = spawn('/usr/sbin/pgbouncer', [...(asRoot ? ['-u', 'postgres'] : []), ini], { stdio: 'ignore' });
  const exited = once(child, 'exit');
  const url = new URL(databaseUrl);
  url.host = `127.0.0.1:${port}`;
  const probe = async () => {
    const client = new pg.Client({ connectionString: url.toString() });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.query('SELECT 1');
      return true;
    } catch {
      return false;
    } finally {
      await client.end().catch(() => undefined);
    }
  };
  try {
    await waitFor(
      async () => {
        if (child.exitCode !== null) throw new Error(`pgbouncer exited: ${log()}`);
        return probe();
      },
      { timeoutMs: 10_000, intervalMs: 100, failure: () => `pgbouncer did not answer: ${log()}` },
    );
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }

  function log(): string {
    try {
      return readFileSync(logFile, 'utf8');
    } catch {
      return '';
    }
  }

  return {
    url: url.toString(),
    port,
    /** PgBouncer's log so far (warnings and errors it met). */
    log,
    /** SHOW <what> on PgBouncer's admin console (POOLS, SERVERS, CLIENTS, STATS…). */
    async show(what: string): Promise<Record<string, unknown>[]> {
      const admin = new URL(url);
      admin.pathname = '/pgbouncer';
      const client = new pg.Client({ connectionString: admin.toString() });
      await client.connect();
      try {
        // The admin console speaks the simple protocol only.
        const result = await client.query({ text: `SHOW ${what}`, queryMode: 'simple' } as pg.QueryConfig);
        return result.rows;
      } finally {
        await client.end();
      }
    },
    async close() {
      if (child.exitCode === null) {
        child.kill('SIGINT');
        await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 3_000))]);
        if (child.exitCode === null) child.kill('SIGKILL');
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
