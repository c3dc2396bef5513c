import { randomUUID } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { injectStatusBody, urls } from '../support/partner.js';
import { startTestService, type TestService } from '../support/service.js';

// The audit trail, the pending disable row and the read-only status endpoint (docs/interfaces.md §9).

const db = testDatabase();
let svc: TestService;
let limitedSvc: TestService;
let networkA: string;
let networkB: string;
const keyA = newApiKey();
const keyB = newApiKey();
const keyLimited = newApiKey();
let networkLimited: string;

beforeAll(async () => {
  networkA = await db.network();
  networkB = await db.network();
  networkLimited = await db.network();
  svc = await startTestService({
    partners: [
      { key: keyA, networkId: networkA, name: 'audit-partner-a' },
      { key: keyB, networkId: networkB, name: 'audit-partner-b' },
    ],
  });
  limitedSvc = await startTestService({
    partners: [{ key: keyLimited, networkId: networkLimited, name: 'audit-limited' }],
    env: { RATE_LIMIT_MAX: '2', RATE_LIMIT_WINDOW_MS: '60000' },
  });
});

afterEach(() => {
  svc.sim.refuse([]);
});

afterAll(async () => {
  const closed = await Promise.allSettled([svc?.close(), limitedSvc?.close()]);
  await db.close();
  for (const result of closed) if (result.status === 'rejected') throw result.reason;
});

/** `key` null: no x-api-key header at all. */
function post(body: unknown, key: string | null = keyA, service: TestService = svc) {
  return injectStatusBody(service.app, key, body);
}

function getStatus(path: string, key: string | null = keyA) {
  return svc.app.inject({ method: 'GET', url: urls.agentStatus(path), headers: key === null ? {} : { 'x-api-key': key } });
}

interface ChangeRow {
  agent_id: string;
  network_id: string;
  enabled: boolean;
  partner_name: string;
  request_id: string | null;
}

async function changes(agentId: string): Promise<ChangeRow[]> {
  const { rows } = await db.pool.query(
    'SELECT agent_id, network_id::text, enabled, partner_name, request_id FROM agent_status_changes WHERE agent_id = $1 ORDER BY change_id',
    [agentId],
  );
  return rows;
}

/** The response is the given problem, as one comparison (one diff when it is not). */
function problemOf(response: LightMyRequestResponse, status: number, kind: string) {
  const body = response.statusCode === status ? response.json() : {};
  expect({
    statusCode: response.statusCode,
    contentType: response.headers['content-type'],
    type: body.type,
    status: body.status,
    requestId: body.requestId,
  }).toEqual({
    statusCode: status,
    contentType: expect.stringMatching(/^application\/problem\+json/),
    type: `urn:partner-agent-status:problem:${kind}`,
    status,
    requestId: response.headers['x-request-id'],
  });
  return body;
}

describe('agent_status_changes: one row per request that reaches the status statement', () => {
  it('appends a row for a disable, a repeated disable and an enable, with label, request id, network and state', async () => {
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 2);
    const answers = [
      await post({ agentId, enabled: false }),
      await post({ agentId, enabled: false }),
      await post({ agentId, enabled: true }),
    ];
    expect(answers.map((a) => a.statusCode)).toEqual([200, 200, 200]);
    expect(answers.map((a) => a.json().pausedCampaignCount)).toEqual([2, 0, 0]);
    const ids = answers.map((a) => String(a.headers['x-request-id']));
    expect(new Set(ids).size).toBe(3);

    expect(await changes(agentId)).toEqual([
      { agent_id: agentId, network_id: networkA, enabled: false, partner_name: 'audit-partner-a', request_id: ids[0] },
      { agent_id: agentId, network_id: networkA, enabled: false, partner_name: 'audit-partner-a', request_id: ids[1] },
      { agent_id: agentId, network_id: networkA, enabled: true, partner_name: 'audit-partner-a', request_id: ids[2] },
    ]);
  });

  it("records the caller's x-request-id when it sent a sane one", async () => {
    const agentId = await db.agent(networkA);
    const requestId = `audit-${randomUUID()}`;
    const response = await svc.setStatus(keyA, agentId, true, { 'x-request-id': requestId });
    expect(response.headers['x-request-id']).toBe(requestId);
    expect((await changes(agentId)).map((row) => row.request_id)).toEqual([requestId]);
  });

  it('writes nothing for requests that end in 400, 401, 404 or 429', async () => {
    const agentId = await db.agent(networkA);
    const otherNetworksAgent = await db.agent(networkB);

    problemOf(await post({ agentId, enabled: false, networkId: networkA }), 400, 'validation');
    problemOf(await post({ agentId, enabled: 'false' }), 400, 'validation');
    problemOf(await post('{"agentId":', keyA), 400, 'validation');
    problemOf(await post({ agentId, enabled: false }, newApiKey()), 401, 'unauthorized');
    problemOf(await post({ agentId, enabled: false }, null), 401, 'unauthorized');
    problemOf(await post({ agentId: otherNetworksAgent, enabled: false }), 404, 'not-found');
    problemOf(await post({ agentId: otherNetworksAgent, enabled: true }), 404, 'not-found');

    // 429: the limited network spends its budget of two, then asks for a change.
    const limitedAgent = await db.agent(networkLimited);
    for (let i = 0; i < 2; i += 1) {
      const read = await limitedSvc.app.inject({
        method: 'GET',
        url: urls.agentStatus(limitedAgent),
        headers: { 'x-api-key': keyLimited },
      });
      expect(read.statusCode).toBe(200);
    }
    problemOf(await post({ agentId: limitedAgent, enabled: false }, keyLimited, limitedSvc), 429, 'rate-limited');

    for (const id of [agentId, otherNetworksAgent, limitedAgent]) {
      expect(await changes(id)).toEqual([]);
      expect(await db.pendingRow(id)).toBe(false);
      expect(await db.agentApproved(id)).toBe(true);
    }
  });

  it('never holds a key', async () => {
    const agentId = await db.agent(networkA);
    await post({ agentId, enabled: false });
    await post({ agentId, enabled: true });
    for (const table of ['agent_status_changes', 'pending_disables']) {
      const { rows } = await db.pool.query(
        `SELECT count(*)::int AS n FROM ${table} t WHERE strpos(row_to_json(t)::text, $1) > 0 OR strpos(row_to_json(t)::text, $2) > 0`,
        [keyA, keyB],
      );
      expect(rows[0].n).toBe(0);
    }
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM agent_status_changes WHERE agent_id = $1', [agentId]);
    expect(rows[0].n).toBe(2);
  });
});

describe('pending_disables', () => {
  it('is gone once a disable has paused everything', async () => {
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 3);
    expect((await post({ agentId, enabled: false })).statusCode).toBe(200);
    expect(await db.pendingRow(agentId)).toBe(false);
  });

  it('stays while campaigns are left, and is deleted once nothing is left', async () => {
    const agentId = await db.agent(networkA);
    const ids = await db.campaigns(agentId, 4);
    // Spend management leaves one campaign out of its answer: not paused, the disable incomplete.
    svc.sim.refuse(ids.slice(0, 1));
    const failed = await post({ agentId, enabled: false });
    const body = problemOf(failed, 500, 'dependency-failure');
    expect(body).toMatchObject({ pausedCampaignCount: 3, remainingCampaignCount: 1 });
    expect(await db.pendingRow(agentId)).toBe(true);

    svc.sim.refuse([]);
    const repeated = await post({ agentId, enabled: false });
    expect(repeated.statusCode).toBe(200);
    expect(await db.pendingRow(agentId)).toBe(false);
    expect((await db.pausedIds(agentId)).size).toBe(4);
  });

  it('is deleted by an enable', async () => {
    const agentId = await db.agent(networkA);
    const ids = await db.campaigns(agentId, 2);
    svc.sim.refuse(ids);
    problemOf(await post({ agentId, enabled: false }), 500, 'dependency-failure');
    expect(await db.pendingRow(agentId)).toBe(true);

    expect((await post({ agentId, enabled: true })).statusCode).toBe(200);
    expect(await db.pendingRow(agentId)).toBe(false);
    expect(await db.agentApproved(agentId)).toBe(true);
  });
});

describe('GET /partner/agents/{agentId}/status', () => {
  it('reads the state before a disable, after it and after an enable', async () => {
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 3);
    await db.campaigns(agentId, 2, { active: false });
    await db.campaigns(agentId, 1, { paused: true });

    const before = await getStatus(agentId);
    expect(before.statusCode).toBe(200);
    expect(before.headers['content-type']).toMatch(/^application\/json/);
    expect(before.json()).toEqual({
      agentId,
      networkId: networkA,
      enabled: true,
      activeUnpausedCampaignCount: 3,
      disableInProgress: false,
    });

    expect((await post({ agentId, enabled: false })).statusCode).toBe(200);
    expect((await getStatus(agentId)).json()).toEqual({
      agentId,
      networkId: networkA,
      enabled: false,
      activeUnpausedCampaignCount: 0,
      disableInProgress: false,
    });

    expect((await post({ agentId, enabled: true })).statusCode).toBe(200);
    expect((await getStatus(agentId)).json()).toEqual({
      agentId,
      networkId: networkA,
      enabled: true,
      activeUnpausedCampaignCount: 0,
      disableInProgress: false,
    });
  });

  it('takes the agent id with its colon as is or percent-encoded', async () => {
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 2);
    const raw = await getStatus(agentId);
    const encoded = await getStatus(agentId.replace(':', '%3A'));
    const encodedLower = await getStatus(agentId.replace(':', '%3a'));
    for (const response of [raw, encoded, encodedLower]) {
      expect(response.statusCode).toBe(200);
      expect(response.json()).toEqual({
        agentId,
        networkId: networkA,
        enabled: true,
        activeUnpausedCampaignCount: 2,
        disableInProgress: false,
      });
    }
  });

  it('answers 400 for a malformed id and 401 without a valid key', async () => {
    const agentId = await db.agent(networkA);
    for (const malformed of [
      'us-east-1:not-a-uuid',
      agentId.toUpperCase().replace('US-EAST-1', 'us-east-1'),
      `eu-west-1:${randomUUID()}`,
      randomUUID(),
    ]) {
      const body = problemOf(await getStatus(encodeURIComponent(malformed)), 400, 'validation');
      expect(body.detail).toMatch(/agentId/);
    }
    problemOf(await getStatus(agentId, null), 401, 'unauthorized');
    problemOf(await getStatus(agentId, newApiKey()), 401, 'unauthorized');
    // Authentication first: a malformed id without a key is a 401.
    problemOf(await getStatus('us-east-1:not-a-uuid', null), 401, 'unauthorized');
  });

  it("answers the same 404 for another network's agent and for one that exists nowhere", async () => {
    const elsewhere = await db.agent(networkB);
    await db.campaigns(elsewhere, 2);
    const nowhere = `us-east-1:${randomUUID()}`;
    const a = await getStatus(elsewhere);
    const b = await getStatus(nowhere);
    const bodyA = problemOf(a, 404, 'not-found');
    const bodyB = problemOf(b, 404, 'not-found');
    const { requestId: _a, ...restA } = bodyA;
    const { requestId: _b, ...restB } = bodyB;
    expect(restA).toEqual(restB);
    expect(JSON.stringify(bodyA).replace(bodyA.requestId, '')).toBe(JSON.stringify(bodyB).replace(bodyB.requestId, ''));
    const headersOf = (response: LightMyRequestResponse) => {
      const { 'x-request-id': _id, date: _date, 'content-length': length, ...rest } = response.headers;
      return { ...rest, bodyLengthWithoutId: Number(length) - String(_id).length };
    };
    expect(headersOf(a)).toEqual(headersOf(b));
    expect(JSON.stringify(bodyA)).not.toContain(elsewhere);
  });

  it('changes nothing', async () => {
    const agentId = await db.agent(networkA);
    const ids = await db.campaigns(agentId, 2);
    const elsewhere = await db.agent(networkB);
    for (let i = 0; i < 3; i += 1) {
      expect((await getStatus(agentId)).statusCode).toBe(200);
      expect((await getStatus(elsewhere)).statusCode).toBe(404);
    }
    for (const id of [agentId, elsewhere]) {
      expect(await changes(id)).toEqual([]);
      expect(await db.pendingRow(id)).toBe(false);
      expect(await db.agentApproved(id)).toBe(true);
    }
    expect((await db.pausedIds(agentId)).size).toBe(0);
    expect(await svc.pausedInRedis(ids)).toEqual([false, false]);
    expect(ids.some((id) => svc.sim.isPaused(id))).toBe(false);
  });

  it('shows disableInProgress while a pending row exists, with the remaining count of the 500', async () => {
    const agentId = await db.agent(networkA);
    const ids = await db.campaigns(agentId, 5);
    svc.sim.refuse(ids.slice(0, 2));
    const failed = await post({ agentId, enabled: false });
    const body = problemOf(failed, 500, 'dependency-failure');
    expect(body).toMatchObject({ pausedCampaignCount: 3, remainingCampaignCount: 2 });

    const during = await getStatus(agentId);
    expect(during.json()).toEqual({
      agentId,
      networkId: networkA,
      enabled: false,
      activeUnpausedCampaignCount: body.remainingCampaignCount,
      disableInProgress: true,
    });
    expect(await db.pendingRow(agentId)).toBe(true);

    // Once spend management takes them, a repeat finishes the job and the status says so.
    svc.sim.refuse([]);
    expect((await post({ agentId, enabled: false })).statusCode).toBe(200);
    expect((await getStatus(agentId)).json()).toMatchObject({ enabled: false, activeUnpausedCampaignCount: 0, disableInProgress: false });
  });
});
