import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { startTestService, type TestService } from '../support/service.js';
import { patience, waitFor } from '../support/wait.js';

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
  svc = await startTestService({
    partners: [
      { key, networkId: strict, name: 'strict' },
      { key: otherKey, networkId: lenient, name: 'lenient' },
    ],
  });
  lenientKey = otherKey;
});

afterAll(async () => {
  await svc?.close();
  await db.close();
});

const restricted = async (agentId: string) => (await db.pool.query('SELECT agent_is_restricted($1) AS r', [agentId])).rows[0].r as boolean;

describe('restrictions while disabled, enforced by the database (require_agent_approval and not approved)', () => {
  it('refuses to create a campaign for a disabled agent (P0001)', async () => {
    const agentId = await db.agent(strict);
    await svc.setStatus(key, agentId, false);
    await expect(db.campaigns(agentId, 1)).rejects.toMatchObject({
      code: 'P0001',
      message: expect.stringMatching(/create_campaign is not allowed/),
    });
  });

  it('refuses to unpause a campaign of a disabled agent (P0001), and allows it again after enable', async () => {
    const agentId = await db.agent(strict);
    const [campaign] = await db.campaigns(agentId, 1);
    await svc.setStatus(key, agentId, false);
    await expect(db.pool.query('UPDATE campaigns SET paused = false WHERE campaign_id = $1', [campaign])).rejects.toMatchObject({
      code: 'P0001',
      message: expect.stringMatching(/unpause_campaign is not allowed/),
    });

    await svc.setStatus(key, agentId, true);
    expect(await restricted(agentId)).toBe(false);
    await db.pool.query('UPDATE campaigns SET paused = false WHERE campaign_id = $1', [campaign]);
    expect((await db.pausedIds(agentId)).size).toBe(0);
  });

  it('still lets the disable itself pause campaigns and other updates through', async () => {
    const agentId = await db.agent(strict);
    const [campaign] = await db.campaigns(agentId, 1);
    expect((await svc.setStatus(key, agentId, false)).json().pausedCampaignCount).toBe(1);
    await db.pool.query('UPDATE campaigns SET active = false WHERE campaign_id = $1', [campaign]);
  });

  it('tells other operations through agent_is_restricted()', async () => {
    const agentId = await db.agent(strict);
    expect(await restricted(agentId)).toBe(false);
    await svc.setStatus(key, agentId, false);
    expect(await restricted(agentId)).toBe(true);
    expect(await restricted(`us-east-1:${randomUUID()}`)).toBe(false);
  });

  it('restricts nothing in a network without require_agent_approval', async () => {
    const agentId = await db.agent(lenient);
    const [campaign] = await db.campaigns(agentId, 1);
    expect((await svc.setStatus(lenientKey, agentId, false)).statusCode).toBe(200);
    expect(await restricted(agentId)).toBe(false);
    await db.campaigns(agentId, 1);
    await db.pool.query('UPDATE campaigns SET paused = false WHERE campaign_id = $1', [campaign]);
  });
});

/**
 * Every way a campaign of a restricted agent could start running, tried by a plain session and by
 * one whose search_path puts a hostile schema first (a function agent_is_restricted that always
 * says false, a table agents that says approved) and that has a temporary table agents too.
 */
describe("the side doors are closed, whatever the caller's search_path", () => {
  const shadowSchema = `shadow_${randomUUID().replaceAll('-', '')}`;
  let plain: pg.Client;
  let shadowed: pg.Client;

  beforeAll(async () => {
    const url = db.pool.options.connectionString!;
    plain = new pg.Client({ connectionString: url });
    shadowed = new pg.Client({ connectionString: url });
    await Promise.all([plain.connect(), shadowed.connect()]);
    await db.pool.query(`CREATE SCHEMA ${shadowSchema}`);
    await db.pool.query(`CREATE FUNCTION ${shadowSchema}.agent_is_restricted(text) RETURNS boolean LANGUAGE sql AS 'SELECT false'`);
    await db.pool.query(`CREATE TABLE ${shadowSchema}.agents (agent_id text, network_id uuid, agent_approved boolean)`);
    await shadowed.query(`SET search_path = ${shadowSchema}, public`);
    await shadowed.query('CREATE TEMP TABLE agents (agent_id text, network_id uuid, agent_approved boolean)');
  });

  afterAll(async () => {
    await Promise.all([plain?.end(), shadowed?.end()]);
    await db.pool.query(`DROP SCHEMA IF EXISTS ${shadowSchema} CASCADE`);
  });

  /** A disabled agent of the strict network, and what the shadows would wrongly say about it. */
  async function disabledAgent(): Promise<string> {
    const agentId = await db.agent(strict);
    await svc.setStatus(key, agentId, false);
    await db.pool.query(`INSERT INTO ${shadowSchema}.agents VALUES ($1, $2, true)`, [agentId, strict]);
    await shadowed.query('INSERT INTO agents VALUES ($1, $2, true)', [agentId, strict]);
    return agentId;
  }

  const sessions = { 'a plain session': () => plain, 'a session with a shadowing schema and temp table': () => shadowed };

  for (const [who, session] of Object.entries(sessions)) {
    describe(`from ${who}`, () => {
      it('refuses to insert a campaign (create_campaign)', async () => {
        const agentId = await disabledAgent();
        await expect(
          session().query('INSERT INTO public.campaigns (campaign_id, agent_id) VALUES ($1, $2)', [randomUUID(), agentId]),
        ).rejects.toMatchObject({ code: 'P0001', message: expect.stringMatching(/create_campaign/) });
        await expect(
          session().query('INSERT INTO public.campaigns (campaign_id, agent_id, paused) VALUES ($1, $2, true)', [randomUUID(), agentId]),
        ).rejects.toMatchObject({ code: 'P0001' });
      });

      it('refuses to unpause a campaign (unpause_campaign)', async () => {
        const agentId = await db.agent(strict);
        const [campaign] = await db.campaigns(agentId, 1);
        await svc.setStatus(key, agentId, false);
        await expect(
          session().query('UPDATE public.campaigns SET paused = false WHERE campaign_id = $1', [campaign]),
        ).rejects.toMatchObject({ code: 'P0001', message: expect.stringMatching(/unpause_campaign/) });
      });

      it('refuses to re-activate an inactive unpaused campaign (activate_campaign)', async () => {
        const agentId = await db.agent(strict);
        const [campaign] = await db.campaigns(agentId, 1, { active: false });
        await svc.setStatus(key, agentId, false);
        await expect(session().query('UPDATE public.campaigns SET active = true WHERE campaign_id = $1', [campaign])).rejects.toMatchObject(
          { code: 'P0001', message: expect.stringMatching(/activate_campaign/) },
        );
      });

      it('refuses to move a campaign to the agent (move_campaign), paused or not', async () => {
        const agentId = await disabledAgent();
        const other = await db.agent(strict);
        const [running, paused] = [(await db.campaigns(other, 1))[0], (await db.campaigns(other, 1, { paused: true }))[0]];
        for (const campaign of [running, paused]) {
          await expect(
            session().query('UPDATE public.campaigns SET agent_id = $1 WHERE campaign_id = $2', [agentId, campaign]),
          ).rejects.toMatchObject({ code: 'P0001', message: expect.stringMatching(/move_campaign/) });
        }
      });

      it('answers agent_is_restricted() truthfully when called by its schema', async () => {
        const agentId = await disabledAgent();
        const { rows } = await session().query('SELECT public.agent_is_restricted($1) AS r', [agentId]);
        expect(rows[0].r).toBe(true);
      });
    });
  }

  it('leaves allowed changes alone: pausing, deactivating, and re-activating a paused campaign', async () => {
    const agentId = await db.agent(strict);
    const [a, b] = await db.campaigns(agentId, 2, { active: false, paused: true });
    expect((await svc.setStatus(key, agentId, false)).statusCode).toBe(200);
    expect((await plain.query('UPDATE public.campaigns SET active = true WHERE campaign_id = $1', [a])).rowCount).toBe(1);
    expect((await plain.query('UPDATE public.campaigns SET active = false WHERE campaign_id = $1', [b])).rowCount).toBe(1);
    const { rows } = await plain.query(
      'SELECT campaign_id, active, paused FROM public.campaigns WHERE campaign_id = ANY($1) ORDER BY campaign_id = $2 DESC',
      [[a, b], a],
    );
    expect(rows.map((row) => [row.active, row.paused])).toEqual([
      [true, true],
      [false, true],
    ]);
  });

  it('a campaign inserted while a disable commits is either refused or seen and paused by it', async () => {
    const agentId = await db.agent(strict);
    const inserted = randomUUID();
    await plain.query('BEGIN');
    await plain.query('INSERT INTO public.campaigns (campaign_id, agent_id) VALUES ($1, $2)', [inserted, agentId]);
    // The inserting transaction holds the agent row FOR SHARE (the restriction trigger). The disable
    // does not wait for it: it records its change and its pending disable (their foreign keys take
    // only FOR KEY SHARE), leaves the flag for when the row can be locked, and goes on until it can.
    // Committed once the disable is recorded (a state, not a pause: on a busy machine a fixed pause
    // could commit first and leave the race untested); the disable then sees the campaign and pauses it.
    const disabling = svc.setStatus(key, agentId, false);
    await waitFor(async () => (await db.changeCount(agentId)) === 1 && (await db.pendingDisable(agentId)) !== undefined, {
      timeoutMs: patience(10_000),
      intervalMs: 10,
      failure: 'the disable was never recorded while the insert was open',
    });
    await plain.query('COMMIT');
    const response = await disabling;
    expect(response.statusCode).toBe(200);
    expect(response.json().pausedCampaignCount).toBe(1);
    expect((await db.pausedIds(agentId)).has(inserted)).toBe(true);
  });
});
