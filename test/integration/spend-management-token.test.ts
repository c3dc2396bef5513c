import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSpendSimulator } from '../../src/spend-simulator/simulator.js';
import { newApiKey, testDatabase } from '../support/data.js';
import { startTestService, type TestService } from '../support/service.js';

/**
 * SPEND_MANAGEMENT_TOKEN is sent as `authorization: Bearer …` (docs/interfaces.md §6). The
 * simulator here demands its token and answers 401 without it, so a disable that pauses anything
 * proves the header went out; a service holding another token gets a 500. The tokens are made at
 * run time and must never reach a log line or a metric.
 */
const token = `sm_${randomBytes(24).toString('base64url')}`;
const wrongToken = `sm_${randomBytes(24).toString('base64url')}`;
const db = testDatabase();
const simulator = createSpendSimulator({ token });
const key = newApiKey();
let networkId: string;
let right: TestService;
let wrong: TestService;

beforeAll(async () => {
  await simulator.listen({ port: 0, host: '127.0.0.1' });
  networkId = await db.network();
  const partners = [{ key, networkId, name: 'token-partner' }];
  // No worker retries in the background: each test sees only the calls its own request made.
  const env = { WORKER_POLL_INTERVAL_MS: '60000' };
  [right, wrong] = await Promise.all([
    startTestService({ partners, simulator, env: { ...env, SPEND_MANAGEMENT_TOKEN: token } }),
    startTestService({ partners, simulator, env: { ...env, SPEND_MANAGEMENT_TOKEN: wrongToken } }),
  ]);
});

afterAll(async () => {
  await right?.close();
  await wrong?.close();
  await simulator.close();
  await db.close();
});

describe('the spend-management bearer token', () => {
  it('is sent: a simulator that demands it pauses the campaigns and the disable answers 200', async () => {
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 3);
    const response = await right.setStatus(key, agentId, false);
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({ agentId, networkId, enabled: false, pausedCampaignCount: 3 });
    expect(ids.every((id) => simulator.simulator.isPaused(id))).toBe(true);
    expect(await db.pausedIds(agentId)).toEqual(new Set(ids));
  });

  it('when wrong, is refused by spend management: the disable answers 500 and nothing is paused', async () => {
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 2);
    const response = await wrong.setStatus(key, agentId, false);
    expect(response.statusCode).toBe(500);
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(response.json()).toMatchObject({ type: 'urn:partner-agent-status:problem:dependency-failure', status: 500 });
    expect(ids.some((id) => simulator.simulator.isPaused(id))).toBe(false);
    expect(await db.pausedIds(agentId)).toEqual(new Set());
    expect(await db.agentApproved(agentId)).toBe(false);
    const text = await wrong.service.metrics.registry.metrics();
    expect(text).toMatch(/^spend_management_auth_failures_total\{status="401"\} [1-9]/m);
  });

  it('never appears in a log line or a metric', async () => {
    for (const svc of [right, wrong]) {
      expect(svc.logs.records().filter((r) => r.msg === 'request completed')).not.toHaveLength(0);
      const everything = svc.logs.lines.join('\n') + (await svc.service.metrics.registry.metrics());
      expect(everything).not.toContain(token);
      expect(everything).not.toContain(wrongToken);
    }
  });
});
