import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { SpendSimulator } from '../../src/spend-simulator/simulator.js';
import { newApiKey, testDatabase } from '../support/data.js';
import { postStatus } from '../support/partner.js';
import { groupProcesses, portIsFree, startServiceProcess } from '../support/process.js';
import { processEnvironment } from '../support/process-environment.js';
import { patience } from '../support/wait.js';

// The built service started as `npm start` starts it: telemetry preloaded, configured by env.
const db = testDatabase();
const key = newApiKey();
let networkId: string;
let environment: Awaited<ReturnType<typeof processEnvironment>>;
let simulator: SpendSimulator;
let baseEnv: Record<string, string>;

beforeAll(async () => {
  networkId = await db.network();
  environment = await processEnvironment([{ key, networkId, name: 'traced-partner' }]);
  simulator = environment.simulator;
  baseEnv = environment.env;
});

afterAll(async () => {
  await environment?.close();
  await db.close();
});

describe('graceful drain: SIGTERM during a slow disable', () => {
  it('turns readiness off, finishes the request with 200 and exits 0', async () => {
    const service = await startServiceProcess({ ...baseEnv, DRAIN_DELAY_MS: '500', OTEL_SDK_DISABLED: 'true' });
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 5);
    simulator.simulator.setMode('slow', { delayMs: 1_500 });
    try {
      const before = simulator.simulator.requests().length;
      const pending = postStatus(service.baseUrl, key, agentId, false);
      // The disable is in flight once spend management has its pause call.
      await vi.waitFor(() => expect(simulator.simulator.requests().length).toBeGreaterThan(before), { timeout: 10_000, interval: 10 });

      service.child.kill('SIGTERM');
      // Readiness turns 503 while the service still answers (a closed server would refuse the
      // connection, and the wait would run out).
      await vi.waitFor(async () => expect((await fetch(`${service.baseUrl}/readyz`)).status).toBe(503), { timeout: 2_000, interval: 20 });
      expect(service.child.exitCode).toBeNull();

      const response = await pending;
      expect(response.status).toBe(200);
      expect(((await response.json()) as { pausedCampaignCount: number }).pausedCampaignCount).toBe(5);
      expect(await service.exited).toBe(0);
      expect(await db.pausedIds(agentId)).toEqual(new Set(ids));
    } finally {
      simulator.simulator.setMode('ok');
      await service.stop();
    }
  });
});

describe('configuration: a missing or invalid variable stops the start with one line naming it', () => {
  it('exits 1 naming DATABASE_URL', async () => {
    const { DATABASE_URL: _omitted, ...env } = baseEnv;
    await expect(startServiceProcess({ ...env, OTEL_SDK_DISABLED: 'true' })).rejects.toThrow(
      /exited with 1[\s\S]*DATABASE_URL is required/,
    );
  });

  it('exits 1 when no valid key set can be loaded', async () => {
    const bad = join(dirname(baseEnv.PARTNER_KEYS_FILE!), 'bad.json');
    writeFileSync(bad, '{"partner-keys": {}}');
    await expect(startServiceProcess({ ...baseEnv, PARTNER_KEYS_FILE: bad, OTEL_SDK_DISABLED: 'true' })).rejects.toThrow(
      /exited with 1[\s\S]*holds no key/,
    );
  });
});

describe('LOG_LEVEL is honoured', () => {
  const levels = (output: string[]) =>
    output.flatMap((line) => {
      try {
        return [(JSON.parse(line) as { level: string }).level];
      } catch {
        return [];
      }
    });

  it('writes debug lines at debug, none at info, and not even request lines at warn', async () => {
    // Three processes start at once: on a loaded machine their event loops lag while they start,
    // and load shedding (not what this test is about) would answer 503.
    const env = { ...baseEnv, DRAIN_DELAY_MS: '0', OTEL_SDK_DISABLED: 'true', OVERLOAD_MAX_EVENT_LOOP_DELAY_MS: '60000' };
    const agentId = await db.agent(networkId);
    const start = (level: string) => startServiceProcess({ ...env, LOG_LEVEL: level });
    const [debug, info, warn] = await Promise.all([start('debug'), start('info'), start('warn')]);
    try {
      for (const service of [debug, info, warn]) {
        // Probes are logged at debug, a partner request at info.
        expect((await fetch(`${service.baseUrl}/livez`)).status).toBe(200);
        expect((await (await postStatus(service.baseUrl, key, agentId, false)).json()) as unknown).toMatchObject({ agentId });
      }
    } finally {
      for (const service of [debug, info, warn]) expect(await service.stop()).toBe(0);
    }
    expect(levels(debug.output)).toEqual(expect.arrayContaining(['debug', 'info']));
    expect(debug.output.some((line) => line.includes('"level":"debug"') && line.includes('"route":"/livez"'))).toBe(true);
    expect(levels(info.output)).toContain('info');
    expect(levels(info.output)).not.toContain('debug');
    expect(info.output.some((line) => line.includes('"msg":"request completed"') && line.includes(agentId))).toBe(true);
    expect(levels(warn.output).filter((level) => level === 'debug' || level === 'info')).toEqual([]);
  });
});

describe('npm start ends with the signal it is sent', () => {
  it('SIGTERM to npm (not its group, as a process manager sends it) stops the service within its drain time and closes the port', async () => {
    const drainMs = 500;
    const shutdownMs = 5_000;
    const env = { ...baseEnv, DRAIN_DELAY_MS: String(drainMs), SHUTDOWN_TIMEOUT_MS: String(shutdownMs), OTEL_SDK_DISABLED: 'true' };
    const service = await startServiceProcess(env, 'npm start');
    const group = service.child.pid!;
    try {
      expect(groupProcesses(group).some((line) => line.includes('dist/main.js'))).toBe(true);
      service.child.kill('SIGTERM');
      // Nothing of npm's tree left within the drain delay, the shutdown allowance and a margin for
      // the exit itself (before the fix, npm exited and node went on serving).
      await vi.waitFor(() => expect(groupProcesses(group)).toEqual([]), { timeout: drainMs + shutdownMs + patience(2_000), interval: 50 });
      expect(await service.exited).toBe(0);
      expect(await portIsFree(service.port)).toBe(true);
    } finally {
      if (groupProcesses(group).length > 0) process.kill(-group, 'SIGKILL');
    }
  });
});
