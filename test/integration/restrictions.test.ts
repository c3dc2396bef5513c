import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { startTestService, type TestService } from '../support/service.js';

const db = testDatabase();
const key = newApiKey();
let strict: string;
let lenient: string;
let svc: TestService;
let lenientKey: string;

beforeAll(async () => {
  strict = await db.network({ requireAgentApproval: true });
  lenient = await db.network({ requireAgentApproval: false });
  const otherKey = newApiKey();
  svc = await startTestService({ partners: [{ key, networkId: strict, name: 'strict' }, { key: otherKey, networkId: lenient, name: 'lenient' }] });
  lenientKey = otherKey;
});

afterAll(async () => {
  await svc?.close();
  await db.close();
});

const setStatus = (apiKey: string, agentId: string, enabled: boolean) =>
  svc.app.inject({
    method: 'POST', url: '/partner/agents/status',
    headers: { 'x-api-key': apiKey, 'content-type': 'application/json' },
    payload: { agentId, enabled },
  });

const restricted = async (agentId: string) =>
  (await db.pool.query('SELECT agent_is_restricted($1) AS r', [agentId])).rows[0].r as boolean;

describe('restrictions while disabled, enforced by the database (require_agent_approval and not approved)', () => {
  it('refuses to create a campaign for a disabled agent (P0001)', async () => {
    const agentId = await db.agent(strict);
    await setStatus(key, agentId, false);
    await expect(db.campaigns(agentId, 1)).rejects.toMatchObject({ code: 'P0001', message: expect.stringMatching(/cannot create campaigns/) });
  });

  it('refuses to unpause a campaign of a disabled agent (P0001), and allows it again after enable', async () => {
    const agentId = await db.agent(strict);
    const [campaign] = await db.campaigns(agentId, 1);
    await setStatus(key, agentId, false);
    await expect(db.pool.query('UPDATE campaigns SET paused = false WHERE campaign_id = $1', [campaign]))
      .rejects.toMatchObject({ code: 'P0001', message: expect.stringMatching(/cannot unpause campaigns/) });

    await setStatus(key, agentId, true);
    expect(await restricted(agentId)).toBe(false);
    await db.pool.query('UPDATE campaigns SET paused = false WHERE campaign_id = $1', [campaign]);
    expect((await db.pausedIds(agentId)).size).toBe(0);
  });

  it('still lets the disable itself pause campaigns and other updates through', async () => {
    const agentId = await db.agent(strict);
    const [campaign] = await db.campaigns(agentId, 1);
    expect((await setStatus(key, agentId, false)).json().pausedCampaignCount).toBe(1);
    await db.pool.query('UPDATE campaigns SET active = false WHERE campaign_id = $1', [campaign]);
  });

  it('tells other operations through agent_is_restricted()', async () => {
    const agentId = await db.agent(strict);
    expect(await restricted(agentId)).toBe(false);
    await setStatus(key, agentId, false);
    expect(await restricted(agentId)).toBe(true);
    expect(await restricted(`us-east-1:${randomUUID()}`)).toBe(false);
  });

  it('restricts nothing in a network without require_agent_approval', async () => {
    const agentId = await db.agent(lenient);
    const [campaign] = await db.campaigns(agentId, 1);
    expect((await setStatus(lenientKey, agentId, false)).statusCode).toBe(200);
    expect(await restricted(agentId)).toBe(false);
    await db.campaigns(agentId, 1);
    await db.pool.query('UPDATE campaigns SET paused = false WHERE campaign_id = $1', [campaign]);
  });
});
