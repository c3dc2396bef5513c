import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { patience, waitFor } from './wait.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** The lowest port the kernel hands out for outgoing connections (and for listen(0)), read once. */
const ephemeralLow = (() => {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 11_024 ? low : 32_768;
  } catch {
    return 32_768;
  }
})();

/** The ports this process has drawn: none is drawn twice. */
const drawn = new Set<number>();

/**
 * A port free to listen on, for a server a test starts. Drawn at random below the kernel's
 * ephemeral range: a port from listen(0) comes from that range, where every outgoing connection of
 * every process takes its local port, so beside a second test suite one was taken between this
 * check and the server's bind (EADDRINUSE, a chaos replica that never started). Below the range
 * only another random draw can collide, one chance in ten thousand, and never one of this process:
 * two draws in a row, a service's port and its metrics port, are still both free until the service
 * binds them, and the bench once drew the same port twice (EADDRINUSE on the metrics port).
 */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt += 1) {
    const port = randomInt(ephemeralLow - 10_000, ephemeralLow);
    if (!drawn.has(port) && (await portIsFree(port))) return take(port);
  }
  for (;;) {
    const server = createServer();
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as { port: number };
    server.close();
    if (!drawn.has(port)) return take(port);
  }
}

function take(port: number): number {
  drawn.add(port);
  return port;
}

/** The processes still in the group, as `pid command` lines. */
export function groupProcesses(pgid: number): string[] {
  const { stdout } = spawnSync('ps', ['-o', 'pid=,args=', '-g', String(pgid)], { encoding: 'utf8' });
  return stdout
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
}

export async function portIsFree(port: number): Promise<boolean> {
  const server = createServer();
  // Not events.once: once(server, 'listening') rejects on 'error' (EADDRINUSE would be thrown).
  const outcome = await new Promise<boolean>((resolve) => {
    server.once('listening', () => resolve(true));
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1');
  });
  if (outcome) await new Promise((resolve) => server.close(resolve));
  return outcome;
}

/**
 * The built service as production starts it (`npm start`: node --import ./dist/telemetry.js
 * dist/main.js), configured only by environment. test/global-setup.ts builds dist/ first. `via`
 * `npm start` runs the script itself, in a process group of its own (the child is npm).
 */
export async function startServiceProcess(env: Record<string, string>, via: 'node' | 'npm start' = 'node') {
  // A port found free can be taken by another suite on the machine before the service binds it
  // (EADDRINUSE, seen beside a second `npm test`): the service is started again on other ports.
  // Ports the caller chose are its own: no second try.
  const tries = env.PORT || env.METRICS_PORT ? 1 : 3;
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await startServiceOnce(env, via);
    } catch (error) {
      if (attempt >= tries || !(error instanceof AddressInUse)) throw error;
    }
  }
}

/** A start that failed because a port drawn free was taken before the process bound it. */
export class AddressInUse extends Error {}

async function startServiceOnce(env: Record<string, string>, via: 'node' | 'npm start') {
  const port = await freePort();
  const metricsPort = await freePort();
  const output: string[] = [];
  const options = {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: String(port), METRICS_PORT: String(metricsPort), ...env },
    stdio: ['ignore', 'pipe', 'pipe'] as ['ignore', 'pipe', 'pipe'],
  };
  // --expose-gc as npm start has it: the collection before ready runs here too (src/main.ts).
  const child: ChildProcess =
    via === 'npm start'
      ? spawn('npm', ['start', '--silent'], { ...options, env: { ...options.env, HOME: process.env.HOME ?? '' }, detached: true })
      : spawn(process.execPath, ['--expose-gc', '--import', './dist/telemetry.js', 'dist/main.js'], options);
  // Whole lines: the service writes its log in chunks, and a read may end inside a line.
  for (const stream of [child.stdout!, child.stderr!]) {
    createInterface({ input: stream, crlfDelay: Number.POSITIVE_INFINITY }).on('line', (line) => {
      if (line) output.push(line);
    });
  }
  // 'close', not 'exit': by then every line the process wrote has been read.
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));

  let exitCode: number | null | undefined;
  void exited.then((code) => {
    exitCode = code;
  });

  const baseUrl = `http://127.0.0.1:${port}`;
  try {
    await waitFor(
      async () => {
        if (exitCode !== undefined) {
          const message = `service exited with ${exitCode} before listening:\n${output.join('\n')}`;
          throw output.some((line) => line.includes('EADDRINUSE')) ? new AddressInUse(message) : new Error(message);
        }
        return fetch(`${baseUrl}/readyz`).then(
          (r) => r.ok,
          () => false,
        );
      },
      { timeoutMs: patience(20_000), intervalMs: 100, failure: () => `service did not become ready:\n${output.join('\n')}` },
    );
  } catch (error) {
    child.kill('SIGKILL'); // nothing to do when it has exited already
    throw error;
  }

  return {
    baseUrl,
    port,
    metricsUrl: `http://127.0.0.1:${metricsPort}`,
    output,
    /** The first line (parsed JSON) that `matches`, waiting for it up to `timeoutMs`: lines are written in chunks. */
    logLine(matches: (record: Record<string, unknown>) => boolean, timeoutMs = 5_000): Promise<Record<string, unknown>> {
      const firstMatch = () => {
        for (const line of output) {
          if (!line.startsWith('{')) continue;
          const record = JSON.parse(line) as Record<string, unknown>;
          if (matches(record)) return record;
        }
        return undefined;
      };
      return waitFor(firstMatch, {
        timeoutMs,
        intervalMs: 25,
        failure: () => `no such log line within ${timeoutMs} ms:\n${output.join('\n')}`,
      });
    },
    exited,
    child,
    async stop(): Promise<number | null> {
      if (child.exitCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
}
