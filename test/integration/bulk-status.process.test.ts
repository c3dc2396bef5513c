import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import type { SpendSimulator } from '../../src/spend-simulator/simulator.js';
import { standings } from '../support/agreement.js';
import { newApiKey, testDatabase } from '../support/data.js';
import { postBatch, postStatus } from '../support/partner.js';
import { startServiceProcess } from '../support/process.js';
import { processEnvironment } from '../support/process-environment.js';

// Bulk status changes (docs/interfaces.md §16) on the built service, with the real PostgreSQL and
// Redis and the spend-management simulator of this test process.
const db = testDatabase();
const key = newApiKey();
const otherKey = newApiKey();
const limitedKey = newApiKey();
let sim: SpendSimulator['simulator'];
let environment: Awaited<ReturnType<typeof processEnvironment>>;
let redis: Redis;
let networkId: string;
let otherNetworkId: string;
let limitedNetworkId: string;
let baseEnv: Record<string, string>;
type ServiceProcess = Awaited<ReturnType<typeof startServiceProcess>>;
let service: ServiceProcess;

const rateLimitMax = 100_000;

beforeAll(async () => {
  redis = new Redis(inject('redisUrl'), { keyPrefix: inject('redisKeyPrefix'), lazyConnect: true });
  await redis.connect();
  [networkId, otherNetworkId, limitedNetworkId] = await Promise.all([db.network(), db.network(), db.network()]);
  environment = await processEnvironment(
    [
      { key, networkId, name: 'bulk-partner' },
      { key: otherKey, networkId: otherNetworkId, name: 'other-partner' },
      { key: limitedKey, networkId: limitedNetworkId, name: 'limited-partner' },
    ],
    {
      OTEL_SDK_DISABLED: 'true',
      DRAIN_DELAY_MS: '0',
      // A busy test machine is not the overload this file is about.
      OVERLOAD_MAX_EVENT_LOOP_DELAY_MS: '10000',
      RATE_LIMIT_MAX: String(rateLimitMax),
      DISABLES_IN_FLIGHT_PER_NETWORK: '100',
      // A killed replica's claims pass on after 2 s; the statement time-out stays below the lease's margin.
      DATABASE_STATEMENT_TIMEOUT_MS: '450',
      WORKER_POLL_INTERVAL_MS: '200',
      WORKER_LEASE_MS: '2000',
    },
    { keepRequests: 20_000 },
  );
  baseEnv = environment.env;
  sim = environment.simulator.simulator;
  service = await startServiceProcess(baseEnv);
  await untilServed(service.baseUrl);
}, 60_000);

afterAll(async () => {
  await service?.stop();
  await environment?.close();
  redis.disconnect();
  await db.close();
});

interface BatchAnswer {
  batchId: string;
  results: Array<{ agentId: string; status: number; body: Record<string, unknown> }>;
}

/** What must be equal between two answers about two agents set up alike: all but the ids that name them. */
function alike(body: Record<string, unknown>) {
  const { requestId: _requestId, agentId: _agentId, ...rest } = body;
  return rest;
}

/** A fresh set of agents, one of each kind the mixed batch holds. */
async function mixedAgents() {
  const disabled = await db.agent(networkId, { approved: false });
  const plain = await db.agent(networkId);
  const plainIds = await db.campaigns(plain, 3);
  const refusedAgent = await db.agent(networkId);
  const refusedIds = await db.campaigns(refusedAgent, 4);
  const nothingLeft = await db.agent(networkId);
  const foreign = await db.agent(otherNetworkId);
  return { disabled, plain, plainIds, refusedAgent, refusedIds, nothingLeft, foreign, unknown: `us-east-1:${randomUUID()}` };
}

function changesOf(agents: Awaited<ReturnType<typeof mixedAgents>>) {
  return [
    { agentId: agents.disabled, enabled: true },
    { agentId: agents.plain, enabled: false },
    { agentId: agents.foreign, enabled: false },
    { agentId: agents.unknown, enabled: true },
    { agentId: agents.refusedAgent, enabled: false },
    { agentId: agents.nothingLeft, enabled: false },
  ];
}

/** Waits until a fresh process serves the partner routes (its start may leave it shedding, a 503 that changes nothing, for a moment). */
async function untilServed(baseUrl: string): Promise<void> {
  await vi.waitFor(
    async () => {
      const response = await fetch(`${baseUrl}/partner/agents/us-east-1:${randomUUID()}/status`, { headers: { 'x-api-key': key } });
      expect(response.status).toBe(404);
    },
    { timeout: 30_000, interval: 250 },
  );
}

async function changeRows(agentId: string): Promise<Array<{ enabled: boolean; request_id: string }>> {
  const { rows } = await db.pool.query('SELECT enabled, request_id FROM agent_status_changes WHERE agent_id = $1 ORDER BY change_id', [
    agentId,
  ]);
  return rows;
}

describe('a mixed batch', () => {
  it('answers each change exactly as the single call does, sharing one pause call between its disables', { timeout: 60_000 }, async () => {
    const single = await mixedAgents();
    const batched = await mixedAgents();
    // Spend management leaves one campaign of each "refused" agent out of its answer.
    sim.refuse([single.refusedIds[0]!, batched.refusedIds[0]!]);
    try {
      const singles: Array<{ status: number; body: Record<string, unknown> }> = [];
      for (const change of changesOf(single)) {
        const response = await postStatus(service.baseUrl, key, change.agentId, change.enabled);
        singles.push({ status: response.status, body: (await response.json()) as Record<string, unknown> });
      }
      const callsBefore = sim.requests().length;
      const response = await postBatch(service.baseUrl, key, { changes: changesOf(batched) }, { 'x-request-id': 'bulk-mixed-1' });
      // The calls made while the batch was answered (the worker retries the refused campaign later).
      const callsAfter = sim.requests().length;
      expect(response.status).toBe(200);
      const answer = (await response.json()) as BatchAnswer;
      expect(answer.results.map((r) => r.agentId)).toEqual(changesOf(batched).map((c) => c.agentId));
      expect(answer.results.map((r) => r.status)).toEqual(singles.map((s) => s.status));
      expect(answer.results.map((r) => r.status)).toEqual([200, 200, 404, 404, 500, 200]);
      answer.results.forEach((result, index) => {
        expect(alike(result.body)).toEqual(alike(singles[index]!.body));
      });
      // The 404 of another network's agent is the 404 of an agent that exists nowhere.
      expect(alike(answer.results[2]!.body)).toEqual(alike(answer.results[3]!.body));
      // Both disables with campaigns went out in one call: its campaigns, both agents'.
      const batchedIds = new Set([...batched.plainIds, ...batched.refusedIds]);
      const calls = sim
        .requests()
        .slice(callsBefore, callsAfter)
        .filter((call) => call.campaignIds.some((id) => batchedIds.has(id)));
      expect(calls).toHaveLength(1);
      expect(new Set(calls[0]!.campaignIds)).toEqual(new Set([...batched.plainIds, ...batched.refusedIds]));
      // Each change is its own change row, carrying the batch's request id; none for the 404s.
      for (const agentId of [batched.disabled, batched.plain, batched.refusedAgent, batched.nothingLeft]) {
        expect(await changeRows(agentId)).toEqual([expect.objectContaining({ request_id: 'bulk-mixed-1' })]);
      }
      expect(await changeRows(batched.foreign)).toEqual([]);
      expect(await db.pausedIds(batched.plain)).toEqual(new Set(batched.plainIds));
    } finally {
      sim.refuse([]);
    }
    // The refused campaign is paused by the worker once spend management takes it.
    await db.pendingDisableGone(batched.refusedAgent, 30_000);
  });
});

describe('a batch the service refuses whole', () => {
  it('names the index of a repeated agent id in a 400, and changes nothing', async () => {
    const first = await db.agent(networkId);
    const second = await db.agent(networkId);
    const changes = [
      { agentId: first, enabled: false },
      { agentId: second, enabled: false },
      { agentId: first, enabled: true },
    ];
    const response = await postBatch(service.baseUrl, key, { changes });
    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    const body = (await response.json()) as { errors: Array<{ pointer: string }>; detail: string };
    expect(body.errors[0]!.pointer).toBe('/changes/2/agentId');
    expect(body.detail).toContain('Change 2');
    expect(await changeRows(first)).toEqual([]);
    expect(await changeRows(second)).toEqual([]);
    expect(await db.agentApproved(first)).toBe(true);
  });

  it('answers 429 to a batch past the remaining rate allowance, using none of it and changing nothing', async () => {
    const agents = await Promise.all(Array.from({ length: 30 }, () => db.agent(limitedNetworkId)));
    // Spend most of the window: rateLimitMax - 20 requests left... then a batch of 30 does not fit.
    const bucket = `rate-limit:${limitedNetworkId}`;
    await redis.set(bucket, String(rateLimitMax - 20), 'PX', 60_000);
    const response = await postBatch(service.baseUrl, limitedKey, { changes: agents.map((agentId) => ({ agentId, enabled: false })) });
    expect(response.status).toBe(429);
    expect(Number(response.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    // None of the allowance used: the counter is where it was (the batch's own request given back).
    expect(Number(await redis.get(bucket))).toBe(rateLimitMax - 20);
    for (const agentId of agents) expect(await changeRows(agentId)).toEqual([]);
    expect(await db.agentApproved(agents[0]!)).toBe(true);
    // A batch that fits goes through and spends one request per change.
    const fits = await postBatch(service.baseUrl, limitedKey, {
      changes: agents.slice(0, 10).map((agentId) => ({ agentId, enabled: true })),
    });
    expect(fits.status).toBe(200);
    expect(Number(await redis.get(bucket))).toBe(rateLimitMax - 20 + 10);
  });
});

describe('Idempotency-Key and respond-async', () => {
  it('answers a repeat with the batch results as they stand, making nothing twice; another batch under the key is a 422', async () => {
    const agents = [await db.agent(networkId), await db.agent(networkId)];
    await db.campaigns(agents[0]!, 5);
    const changes = [
      { agentId: agents[0]!, enabled: false },
      { agentId: agents[1]!, enabled: true },
    ];
    const idempotencyKey = randomUUID();
    const first = await postBatch(service.baseUrl, key, { changes }, { 'idempotency-key': idempotencyKey });
    expect(first.status).toBe(200);
    const firstBody = (await first.json()) as BatchAnswer;
    const again = await postBatch(service.baseUrl, key, { changes }, { 'idempotency-key': idempotencyKey });
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await again.json()).toEqual(firstBody);
    for (const agentId of agents) expect(await changeRows(agentId)).toHaveLength(1);
    const other = await postBatch(service.baseUrl, key, { changes: [changes[0]] }, { 'idempotency-key': idempotencyKey });
    expect(other.status).toBe(422);
  });

  it('answers 202 once every change is recorded; its resource answers 202 for a disable until it is finished', {
    timeout: 60_000,
  }, async () => {
    const agents = [await db.agent(networkId), await db.agent(networkId)];
    const ids = await db.campaigns(agents[0]!, 20);
    sim.setMode('slow', { delayMs: 1_500 });
    let location: string;
    try {
      const response = await postBatch(
        service.baseUrl,
        key,
        {
          changes: [
            { agentId: agents[0]!, enabled: false },
            { agentId: agents[1]!, enabled: true },
          ],
        },
        { prefer: 'respond-async' },
      );
      expect(response.status).toBe(202);
      expect(response.headers.get('preference-applied')).toBe('respond-async');
      location = response.headers.get('location')!;
      expect(location).toMatch(/^\/partner\/agents\/status\/batch\/[0-9a-f-]{36}$/);
      // Recorded: both change rows are there already.
      expect(await changeRows(agents[0]!)).toHaveLength(1);
      expect(await changeRows(agents[1]!)).toHaveLength(1);
      const during = await fetch(`${service.baseUrl}${location}`, { headers: { 'x-api-key': key } });
      expect(during.status).toBe(200);
      const duringBody = (await during.json()) as BatchAnswer;
      expect(duringBody.results.map((r) => r.status)).toEqual([202, 200]);
      expect(duringBody.results[0]!.body).toMatchObject({ enabled: false, disableInProgress: true });
    } finally {
      sim.setMode('ok');
    }
    await vi.waitFor(
      async () => {
        const after = (await (await fetch(`${service.baseUrl}${location}`, { headers: { 'x-api-key': key } })).json()) as BatchAnswer;
        expect(after.results.map((r) => r.status)).toEqual([200, 200]);
        expect(after.results[0]!.body).toMatchObject({ enabled: false, pausedCampaignCount: ids.length });
      },
      { timeout: 30_000, interval: 200 },
    );
    // Another network's key gets the 404 of a batch that does not exist.
    const foreign = await fetch(`${service.baseUrl}${location}`, { headers: { 'x-api-key': otherKey } });
    const nowhere = await fetch(`${service.baseUrl}/partner/agents/status/batch/${randomUUID()}`, { headers: { 'x-api-key': otherKey } });
    expect(foreign.status).toBe(404);
    const { requestId: _a, ...foreignBody } = (await foreign.json()) as Record<string, unknown>;
    const { requestId: _b, ...nowhereBody } = (await nowhere.json()) as Record<string, unknown>;
    expect(foreignBody).toEqual(nowhereBody);
  });
});

describe('SIGKILL in the middle of a batch', () => {
  it('completes every recorded disable by itself after a restart', { timeout: 120_000 }, async () => {
    const agents = await Promise.all(Array.from({ length: 20 }, () => db.agent(networkId)));
    const idsOf = new Map<string, string[]>();
    for (const agentId of agents) idsOf.set(agentId, await db.campaigns(agentId, 10));
    const all = new Set([...idsOf.values()].flat());
    const first = await startServiceProcess(baseEnv);
    await untilServed(first.baseUrl);
    let second: ServiceProcess | undefined;
    sim.setMode('slow', { delayMs: 400 });
    try {
      const before = sim.requests().length;
      const request = postBatch(first.baseUrl, key, { changes: agents.map((agentId) => ({ agentId, enabled: false })) }).then(
        async (response) => new Error(`answered ${response.status}: ${await response.text()}`),
        (error: Error) => error,
      );
      await vi.waitFor(
        () =>
          expect(
            sim
              .requests()
              .slice(before)
              .some((call) => call.campaignIds.some((id) => all.has(id))),
          ).toBe(true),
        {
          timeout: 20_000,
          interval: 10,
        },
      );
      first.child.kill('SIGKILL');
      await first.exited;
      expect(String(await request)).not.toContain('answered');
      sim.setMode('ok');
      // What the killed process had sent has committed or rolled back before the recorded agents are counted.
      await db.quiet();
      const recorded = [];
      for (const agentId of agents) if ((await changeRows(agentId)).length > 0) recorded.push(agentId);
      expect(recorded.length).toBeGreaterThan(0);
      second = await startServiceProcess(baseEnv);
      for (const agentId of recorded) {
        await db.pendingDisableGone(agentId, 60_000);
        expect(await db.pausedIds(agentId)).toEqual(new Set(idsOf.get(agentId)));
        const standing = await standings(
          { pool: db.pool, redis, isPausedInSpendManagement: (id) => sim.isPaused(id) },
          idsOf.get(agentId)!,
        );
        expect(standing.every((campaign) => campaign.redis && campaign.spendManagement)).toBe(true);
        expect(await changeRows(agentId)).toHaveLength(1);
      }
      // No call sent again with other campaigns under the same key.
      expect(sim.keysReused()).toBe(0);
    } finally {
      sim.setMode('ok');
      await Promise.all([first.stop(), second?.stop()]);
    }
  });
});
