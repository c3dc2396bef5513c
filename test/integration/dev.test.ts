import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { describe, expect, it, vi } from 'vitest';
import { postStatus } from '../support/partner.js';
import { freePort } from '../support/process.js';

/**
 * `npm run dev` as a developer runs it: it must serve its demo, and stop cleanly on SIGTERM (sent
 * to npm alone, as a process manager does) and on Ctrl-C (SIGINT to the whole process group, as a
 * terminal does), leaving no process of its tree and no port behind. Needs neither PostgreSQL nor
 * Redis: dev embeds its own.
 */
const root = fileURLToPath(new URL('../..', import.meta.url));

async function startDev() {
  const ports = {
    PORT: await freePort(),
    METRICS_PORT: await freePort(),
    DEV_DATABASE_PORT: await freePort(),
    DEV_SIMULATOR_PORT: await freePort(),
  };
  // Its own process group, as a terminal would give it, so the whole tree can be listed and signalled.
  const child = spawn('npm', ['run', '--silent', 'dev'], {
    cwd: root,
    detached: true,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      LOG_LEVEL: 'warn',
      ...Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  await vi.waitFor(
    () => {
      if (child.exitCode !== null) throw new Error(`npm run dev exited with ${child.exitCode}:\n${output}`);
      expect(output).toContain('Stop with Ctrl-C');
    },
    { timeout: 60_000, interval: 50 },
  );
  return { child, pgid: child.pid!, ports, exited, output: () => output };
}

/** The processes still in the group, as `pid command` lines. */
function groupProcesses(pgid: number): string[] {
  const { stdout } = spawnSync('ps', ['-o', 'pid=,args=', '-g', String(pgid)], { encoding: 'utf8' });
  return stdout
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
}

async function portIsFree(port: number): Promise<boolean> {
  const server = createServer();
  server.listen(port, '127.0.0.1');
  const outcome = await Promise.race([once(server, 'listening').then(() => true), once(server, 'error').then(() => false)]);
  if (outcome) await new Promise((resolve) => server.close(resolve));
  return outcome;
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
        await vi.waitFor(() => expect(groupProcesses(dev.pgid)).toEqual([]), { timeout: 5_000, interval: 50 });
        for (const port of Object.values(dev.ports)) expect(await portIsFree(port), `port ${port}`).toBe(true);
      } finally {
        if (groupProcesses(dev.pgid).length > 0) process.kill(-dev.pgid, 'SIGKILL');
      }
    }, 90_000);
  }
});
