/**
 * The local stack of an e2e run without BASE_URL, started by Playwright's webServer
 * (e2e/playwright.config.ts) as `node --import tsx e2e/local-stack.ts`:
 *
 *   1. builds the service (`npm run build`),
 *   2. creates the run's database on the machine's PostgreSQL and migrates it with the
 *      production migration command (`node dist/db/migrate-cli.js`),
 *   3. writes the partner-keys file (one throwaway bootstrap key: the service refuses to start
 *      without a key; the workers add their own keys later),
 *   4. starts the spend-management simulator (`node dist/spend-simulator/main.js`) and the service
 *      the production way (`node --import ./dist/telemetry.js dist/main.js`), configured only by
 *      the environment, and waits for /readyz,
 *   5. on SIGTERM (Playwright's gracefulShutdown) stops the service with SIGTERM (its graceful
 *      drain), then the simulator, drops the database, deletes the run's Redis keys and the keys
 *      file, and exits.
 *
 * The service and the simulator run in process groups of their own, so the SIGTERM Playwright
 * sends to this launcher's group reaches them once, from here, in order. Their output goes to
 * test-results/e2e-local-stack/*.log.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';
import { waitFor } from '../test/support/wait.js';
import { prepareLocalRun } from './support/local-run.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const logsDir = join(root, 'test-results', 'e2e-local-stack');
const say = (message: string) => process.stdout.write(`[local-stack] ${message}\n`);

if (Number(process.versions.node.split('.')[0]) < 24) {
  say(`Node ${process.version} is too old: run the suite through npm (npm run test:e2e), which uses the project's Node 24`);
  process.exit(1);
}
if (!process.env.E2E_LOCAL_RUN_ID) {
  say('E2E_LOCAL_RUN_ID is not set: this launcher is started by e2e/playwright.config.ts (npm run test:e2e)');
  process.exit(1);
}
const run = await prepareLocalRun();
const databaseName = new URL(run.databaseUrl).pathname.slice(1);
if (!/^pas_e2e_[a-z0-9_]+$/.test(databaseName)) throw new Error(`unexpected database name ${databaseName}`);

const children: Array<{ name: string; child: ChildProcess; exited: Promise<number | null> }> = [];
let databaseCreated = false;
let stopping: Promise<never> | undefined;

function start(name: string, args: string[], env: Record<string, string>) {
  const log = openSync(join(logsDir, `${name}.log`), 'w');
  const child = spawn(process.execPath, args, {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', NODE_ENV: 'production', ...env },
    // Its own process group: Playwright's signal to our group must not reach it directly.
    detached: true,
    stdio: ['ignore', log, log],
  });
  closeSync(log);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code, signal) => resolve(code ?? (signal ? -1 : null))));
  children.push({ name, child, exited });
  void exited.then((code) => {
    if (!stopping) {
      say(`${name} exited unexpectedly with ${code}; last lines of ${name}.log:\n${tail(name)}`);
      void shutdown(1);
    }
  });
  return { child, exited };
}

function tail(name: string, lines = 30): string {
  try {
    return readFileSync(join(logsDir, `${name}.log`), 'utf8')
      .trimEnd()
      .split('\n')
      .slice(-lines)
      .join('\n');
  } catch {
    return '(no log)';
  }
}

function runToEnd(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: root, env, stdio: ['ignore', 'inherit', 'inherit'] });
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${command} ${args.join(' ')} exited with ${code}`))));
  });
}

async function waitUntilReady(url: string, what: string, timeoutMs: number, process_: ChildProcess): Promise<void> {
  await waitFor(
    async () => {
      if (process_.exitCode !== null) throw new Error(`${what} exited before it was ready`);
      return fetch(url, { signal: AbortSignal.timeout(1_000) }).then(
        (r) => r.ok,
        () => false,
      );
    },
    { timeoutMs, intervalMs: 100, failure: `${what} was not ready within ${timeoutMs} ms` },
  );
}

async function stopChild(name: string, timeoutMs: number): Promise<void> {
  const entry = children.find((c) => c.name === name);
  if (!entry || entry.child.exitCode !== null || entry.child.signalCode !== null) return;
  entry.child.kill('SIGTERM');
  const code = await Promise.race([entry.exited, sleep(timeoutMs).then(() => 'timeout' as const)]);
  if (code === 'timeout') {
    say(`${name} did not stop within ${timeoutMs} ms of SIGTERM; killing it`);
    entry.child.kill('SIGKILL');
    await entry.exited;
  } else {
    say(`${name} stopped (exit code ${code}${code === 0 ? '' : ', expected 0'})`);
  }
}

async function cleanUp(): Promise<void> {
  if (databaseCreated) {
    const admin = new pg.Client({ connectionString: run.databaseAdminUrl });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${databaseName} WITH (FORCE)`);
    await admin.end();
    say(`dropped database ${databaseName}`);
  }
  const redis = new Redis(run.redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
  redis.on('error', () => undefined);
  let deleted = 0;
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${run.redisKeyPrefix}*`, 'COUNT', 1000);
    if (keys.length) deleted += await redis.del(...keys);
    cursor = next;
  } while (cursor !== '0');
  await redis.quit();
  say(`deleted ${deleted} Redis keys under ${run.redisKeyPrefix}`);
  rmSync(dirname(run.keysFile), { recursive: true, force: true });
}

function shutdown(code: number): Promise<never> {
  stopping ??= (async () => {
    try {
      // The service first (it drains and closes its pools), then what it depends on.
      await stopChild('service', 20_000);
      await stopChild('spend-simulator', 5_000);
      await cleanUp();
    } catch (error) {
      say(`clean-up failed: ${(error as Error).message}`);
      code = 1;
    }
    process.exit(code);
  })();
  return stopping;
}

for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, () => void shutdown(0));
// Last resort if this process dies some other way: no orphaned service or simulator.
process.on('exit', () => {
  for (const { child } of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

try {
  say(`run ${run.runId} on Node ${process.version}`);
  mkdirSync(logsDir, { recursive: true });
  if (process.env.E2E_SKIP_BUILD !== '1') {
    say('npm run build');
    await runToEnd('npm', ['run', '--silent', 'build'], process.env);
  }

  const admin = new pg.Client({ connectionString: run.databaseAdminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${databaseName}`);
  await admin.end();
  databaseCreated = true;
  await runToEnd(process.execPath, ['dist/db/migrate-cli.js'], { PATH: process.env.PATH ?? '', DATABASE_URL: run.databaseUrl });
  say(`database ${databaseName} created and migrated`);

  // A kubelet-like directory of its own; writes are atomic (temp file, then rename).
  mkdirSync(dirname(run.keysFile), { recursive: true, mode: 0o700 });
  const bootstrap = {
    'partner-keys': { [`pk_bootstrap_${randomBytes(24).toString('base64url')}`]: { networkId: randomUUID(), name: 'e2e-bootstrap' } },
  };
  writeFileSync(`${run.keysFile}.tmp`, JSON.stringify(bootstrap), { mode: 0o600 });
  renameSync(`${run.keysFile}.tmp`, run.keysFile);

  const simulator = start('spend-simulator', ['dist/spend-simulator/main.js'], { HOST: '127.0.0.1', PORT: String(run.simulatorPort) });
  await waitUntilReady(`${run.simulatorUrl}/healthz`, 'the simulator', 15_000, simulator.child);

  const service = start('service', ['--import', './dist/telemetry.js', 'dist/main.js'], {
    HOST: '127.0.0.1',
    PORT: String(run.port),
    METRICS_PORT: String(run.metricsPort),
    DATABASE_URL: run.databaseUrl,
    REDIS_URL: run.redisUrl,
    REDIS_KEY_PREFIX: run.redisKeyPrefix,
    SPEND_MANAGEMENT_URL: run.simulatorUrl,
    SPEND_MANAGEMENT_TIMEOUT_MS: '1000',
    PARTNER_KEYS_FILE: run.keysFile,
    PARTNER_KEYS_POLL_INTERVAL_MS: '500',
    // Required under NODE_ENV=production: the key the webhook signing secrets are sealed with.
    WEBHOOK_SECRETS_KEY: randomBytes(32).toString('base64'),
    LOG_LEVEL: 'info',
    OTEL_SDK_DISABLED: 'true',
    // The same small limit as the kind cluster (k8s-dev/values-dev.yaml): the rate-limit spec
    // reaches it in a second or two with a partner of its own, while no other partner sends even
    // half of it in a whole run (docs/qa.md), whatever the timing.
    RATE_LIMIT_MAX: '200',
    RATE_LIMIT_WINDOW_MS: '10000',
    // No spec is about load shedding; on a busy CI machine the default threshold answered the
    // suite's own requests 503 (issue 37).
    OVERLOAD_MAX_EVENT_LOOP_DELAY_MS: '60000',
    // No endpoints controller to wait for locally: drain at once on SIGTERM.
    DRAIN_DELAY_MS: '0',
    SHUTDOWN_TIMEOUT_MS: '10000',
  });
  await waitUntilReady(`${run.baseUrl}/readyz`, 'the service', 30_000, service.child);
  say(`service ready at ${run.baseUrl} (logs: test-results/e2e-local-stack/)`);
} catch (error) {
  say(`could not start: ${(error as Error).message}`);
  for (const name of ['service', 'spend-simulator']) if (children.some((c) => c.name === name)) say(`${name}.log:\n${tail(name)}`);
  await shutdown(1);
}
