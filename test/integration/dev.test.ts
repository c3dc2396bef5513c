import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import { describe, expect, it, vi } from 'vitest';
import { watchDatabase } from '../../src/dev/database-watch.js';
import { postStatus } from '../support/partner.js';
import { AddressInUse, freePort, groupProcesses, portIsFree } from '../support/process.js';
import { patience, waitFor } from '../support/wait.js';

/**
 * `npm run dev` as a developer runs it: it must serve its demo, and stop cleanly on SIGTERM (sent
 * to npm alone, as a process manager does) and on Ctrl-C (SIGINT to the whole process group, as a
 * terminal does), leaving no process of its tree and no port behind. Needs neither PostgreSQL nor
 * Redis: dev embeds its own.
 */
const root = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Starts dev on four free ports, again on new ones (up to three times) when one was taken between
 * the draw and dev's bind, seconds later: another suite on the machine can draw it meanwhile.
 */
async function startDev(extraEnv: Record<string, string> = {}, script = 'dev') {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await startDevOnce(extraEnv, script);
    } catch (error) {
      if (attempt >= 3 || !(error instanceof AddressInUse)) throw error;
    }
  }
}

async function startDevOnce(extraEnv: Record<string, string>, script: string) {
  const ports = {
    PORT: await freePort(),
    METRICS_PORT: await freePort(),
    DEV_DATABASE_PORT: await freePort(),
    DEV_SIMULATOR_PORT: await freePort(),
  };
  // Its own process group, as a terminal would give it, so the whole tree can be listed and signalled.
  const child = spawn('npm', ['run', '--silent', script], {
    cwd: root,
    detached: true,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      LOG_LEVEL: 'warn',
      // Dev keeps the service's shedding defaults; on a busy machine they would answer the test 503.
      OVERLOAD_MAX_EVENT_LOOP_DELAY_MS: '60000',
      ...extraEnv,
      ...Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  // 'close', not 'exit': by then every line it wrote has been read (EADDRINUSE among them).
  let closed = false;
  child.once('close', () => (closed = true));
  try {
    await waitFor(
      () => {
        // An exit is final: stop waiting at once.
        if (closed) {
          const message = `npm run dev exited with ${child.exitCode}:\n${output}`;
          throw output.includes('EADDRINUSE') ? new AddressInUse(message) : new Error(message);
        }
        return output.includes('Stop with Ctrl-C');
      },
      { timeoutMs: patience(60_000), intervalMs: 50, failure: () => `npm run dev did not print its banner:\n${output}` },
    );
  } catch (error) {
    if (groupProcesses(child.pid!).length > 0) process.kill(-child.pid!, 'SIGKILL');
    throw error;
  }
  return { child, pgid: child.pid!, ports, exited, output: () => output };
}

type Dev = Awaited<ReturnType<typeof startDev>>;

async function stopDev(dev: Dev) {
  if (groupProcesses(dev.pgid).length > 0) process.kill(-dev.pgid, 'SIGKILL');
}

function field(text: string, label: string): string {
  const match = new RegExp(`${label}\\s+(\\S+)`).exec(text);
  if (!match?.[1]) throw new Error(`no "${label}" in the dev output`);
  return match[1];
}

describe('npm run dev', () => {
  for (const [how, signal] of [
    ['SIGTERM to npm', 'SIGTERM'],
    ['Ctrl-C to the process group', 'SIGINT'],
  ] as const) {
    it(`serves the seeded demo and stops cleanly on ${how}`, async () => {
      const dev = await startDev();
      try {
        const text = dev.output();
        const response = await postStatus(
          `http://127.0.0.1:${dev.ports.PORT}`,
          field(text, 'Demo API key'),
          field(text, 'Demo agents'),
          false,
        );
        expect(response.status).toBe(200);
        expect(await response.json()).toMatchObject({ enabled: false, pausedCampaignCount: 12 });
        expect(groupProcesses(dev.pgid).length).toBeGreaterThan(1);

        if (signal === 'SIGTERM') dev.child.kill('SIGTERM');
        else process.kill(-dev.pgid, 'SIGINT');
        const [code] = await dev.exited;
        expect(code, dev.output()).toBe(0);
        expect(dev.output()).not.toContain('again, exiting at once');
        // npm has exited; nothing of its tree may outlive it.
        await vi.waitFor(() => expect(groupProcesses(dev.pgid)).toEqual([]), { timeout: patience(5_000), interval: 50 });
        for (const port of Object.values(dev.ports)) expect(await portIsFree(port), `port ${port}`).toBe(true);
      } finally {
        await stopDev(dev);
      }
    }, 300_000);
  }
});

/** The local ports of the connections open to the embedded database (from the service, the watch). */
function databaseConnections(databasePort: number): Set<string> {
  const { stdout } = spawnSync('ss', ['-Htn', 'state', 'established', `( dport = :${databasePort} )`], { encoding: 'utf8' });
  return new Set(
    stdout
      .split('\n')
      .map((line) => line.trim().split(/\s+/).at(-2))
      .filter((local): local is string => Boolean(local)),
  );
}

const completions = (output: string) => output.split('\n').filter((line) => line.includes('agent.disable.completed')).length;

/**
 * Disables and enables the demo agent (200s each), and waits for the disable's completion event in
 * dev's output: the whole path through every pool (requests, claim checks, the worker's relay).
 */
async function disableAndEnable(dev: Dev) {
  const text = dev.output();
  const base = `http://127.0.0.1:${dev.ports.PORT}`;
  const [key, agent] = [field(text, 'Demo API key'), field(text, 'Demo agents')];
  const before = completions(dev.output());
  const disable = await postStatus(base, key, agent, false);
  expect(disable.status, await disable.clone().text()).toBe(200);
  await vi.waitFor(() => expect(completions(dev.output()), dev.output()).toBe(before + 1), { timeout: patience(20_000), interval: 100 });
  const enable = await postStatus(base, key, agent, true);
  expect(enable.status, await enable.clone().text()).toBe(200);
  const read = await fetch(`${base}/partner/agents/${agent}/status`, { headers: { 'x-api-key': key } });
  expect(read.status).toBe(200);
}

/**
 * Issue 37: dev answered 500 ("prepared statement already exists", 42P05) to every status read and
 * disable once it had been idle for about a minute, for good. A pool closes a connection idle for
 * DATABASE_IDLE_TIMEOUT_MS (60 s) and opens a new one at the next statement; PGlite is one session
 * behind every connection, so a named statement prepared again collided. The quick form sets that
 * timeout to a second (and the relay's poll, which otherwise keeps its one connection busy, to
 * 5 s) and waits until every connection open after the first calls has been closed: the state
 * that broke it. The soak form (DEV_SOAK=1 npx vitest run --project integration
 * test/integration/dev.test.ts) keeps every default and stays idle 3 minutes, as the user did.
 */
describe('npm run dev left idle', () => {
  const soak = process.env.DEV_SOAK === '1';
  const title = soak
    ? 'still disables and enables after 3 minutes idle, with the default idle timeout'
    : 'still disables and enables once every connection it had opened idled out';
  it(title, async () => {
    const dev = await startDev(
      soak ? {} : { DATABASE_IDLE_TIMEOUT_MS: '1000', EVENTS_RELAY_POLL_INTERVAL_MS: '5000', EVENTS_FEED_POLL_INTERVAL_MS: '5000' },
    );
    try {
      await disableAndEnable(dev);
      const opened = databaseConnections(dev.ports.DEV_DATABASE_PORT);
      expect(opened.size).toBeGreaterThan(0);
      const idleSince = Date.now();
      // The idle time is the subject of the soak; the quick form waits for the closed connections.
      const idle = soak
        ? () => expect(Date.now() - idleSince).toBeGreaterThanOrEqual(180_000)
        : () => {
            const open = databaseConnections(dev.ports.DEV_DATABASE_PORT);
            expect([...opened].filter((local) => open.has(local))).toEqual([]);
          };
      await vi.waitFor(idle, { timeout: soak ? 200_000 : 60_000, interval: 250 });
      await disableAndEnable(dev);
      expect(dev.output()).not.toContain('stopped answering');
    } finally {
      await stopDev(dev);
    }
  }, 420_000);
});

/**
 * Issue 37: dev kept answering 500 on a database that no longer served, with /readyz at 200. Its
 * watch probes the embedded database through the socket server, as the service reaches it, and
 * reports it dead after the probes in a row it is given fail: here the socket server is stopped
 * under it (the database refuses every connection from then on).
 */
describe("npm run dev's database watch", () => {
  it('says nothing while the database answers, and reports it dead once it stops serving', async () => {
    const db = await PGlite.create();
    const port = await freePort();
    const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port, maxConnections: 2 });
    await server.start();
    const reasons: string[] = [];
    let probes = 0;
    server.addEventListener('connection', () => {
      probes += 1;
    });
    const url = `postgres://postgres@127.0.0.1:${port}/postgres?sslmode=disable`;
    const stopWatching = watchDatabase({
      url,
      intervalMs: 100,
      probeTimeoutMs: patience(5_000),
      failuresInARow: 3,
      onDead: (reason) => reasons.push(reason),
    });
    try {
      // Healthy: more probes than the failures in a row that would count, and no report.
      await vi.waitFor(() => expect(probes).toBeGreaterThan(3), { timeout: patience(20_000), interval: 50 });
      expect(reasons).toEqual([]);
      await server.stop();
      await vi.waitFor(() => expect(reasons).toHaveLength(1), { timeout: patience(10_000), interval: 50 });
      expect(reasons[0]).toMatch(/ECONNREFUSED|connect/);
    } finally {
      await stopWatching();
      await server.stop();
      await db.close();
    }
  }, 300_000);
});

/**
 * Issue 37: webhooks could not be tried locally (every local URL answered "must use https" or "not
 * public"). The README's dev section: `npm run dev:webhooks` (the test settings that allow http
 * and 127.0.0.0/8), an endpoint registered with the demo key, `npm run webhook-receiver` with the
 * secret the registration answered, and a disable: the receiver prints the completion event with
 * its signature verified.
 */
describe('npm run dev:webhooks with npm run webhook-receiver', () => {
  it('delivers the demo disable to the receiver on this machine, signed', async () => {
    const dev = await startDev({}, 'dev:webhooks');
    const receiverPort = await freePort();
    let receiver: ReturnType<typeof spawn> | undefined;
    try {
      const text = dev.output();
      const base = `http://127.0.0.1:${dev.ports.PORT}`;
      const key = field(text, 'Demo API key');
      const registered = await fetch(`${base}/partner/webhook-endpoints`, {
        method: 'POST',
        headers: { 'x-api-key': key, 'content-type': 'application/json' },
        body: JSON.stringify({ url: `http://127.0.0.1:${receiverPort}/hook`, eventTypes: ['agent.disable.completed'] }),
      });
      const endpoint = (await registered.json()) as { secret: string };
      expect(registered.status, JSON.stringify(endpoint)).toBe(201);

      receiver = spawn('npm', ['run', '--silent', 'webhook-receiver'], {
        cwd: root,
        env: {
          PATH: process.env.PATH ?? '',
          HOME: process.env.HOME ?? '',
          WEBHOOK_RECEIVER_PORT: String(receiverPort),
          WEBHOOK_SECRET: endpoint.secret,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
        detached: true,
      });
      let printed = '';
      receiver.stdout!.on('data', (chunk) => (printed += chunk));
      receiver.stderr!.on('data', (chunk) => (printed += chunk));
      await vi.waitFor(() => expect(printed).toContain('webhook receiver on'), { timeout: patience(30_000), interval: 50 });

      const agent = field(text, 'Demo agents');
      expect((await postStatus(base, key, agent, false)).status).toBe(200);
      await vi.waitFor(
        () => expect(printed).toMatch(/delivery \S+: \S*agent\.disable\.completed .*"pausedCampaignCount":12.*\(signature verified\)/),
        {
          timeout: patience(30_000),
          interval: 100,
        },
      );
    } finally {
      if (receiver?.pid && groupProcesses(receiver.pid).length > 0) process.kill(-receiver.pid, 'SIGKILL');
      await stopDev(dev);
    }
  }, 300_000);
});
