import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectPausedInDatabaseImpliesEverywhere, serviceStores } from '../support/agreement.js';
import { newApiKey, testDatabase } from '../support/data.js';
import { startTestService, type TestService } from '../support/service.js';

// docs/interfaces.md §7 and §9, in-process against the run's PostgreSQL and Redis: per-campaign
// answers, the worker, backoff, the pipeline's invariant and breakers that fail fast. Killed and
// drained processes are tested with the built service in durability.process.test.ts.

const db = testDatabase();
const key = newApiKey();
let networkId: string;
let svc: TestService;

beforeAll(async () => {
  networkId = await db.network();
  svc = await startTestService({
    partners: [{ key, networkId, name: 'durable' }],
    // The worker polls only when a test asks it to (pollNow), so each test decides when it runs.
    env: {
      WORKER_POLL_INTERVAL_MS: '60000',
      WORKER_BACKOFF_BASE_MS: '10',
      WORKER_BACKOFF_MAX_MS: '20',
      SPEND_MANAGEMENT_TIMEOUT_MS: '500',
    },
  });
});

afterAll(async () => {
  await svc?.close();
  await db.close();
});

/** The value of one series, found by its metric name and a piece of its label set. */
async function metricValue(service: TestService, name: string, labels: string): Promise<number> {
  const text = await service.service.metrics.registry.getSingleMetricAsString(name);
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  if (!line) throw new Error(`no series ${name}{${labels}}`);
  return Number(line.split(' ').at(-1));
}

/** Runs the worker until the agent's pending row is gone, within a bound. */
async function convergeByWorker(service: TestService, agentId: string) {
  const deadline = Date.now() + 10_000;
  while ((await db.pendingDisable(agentId)) && Date.now() < deadline) {
    await service.service.worker.pollNow();
    await service.service.worker.drained();
    await new Promise((resolve) => setTimeout(resolve, 30));
  }
  expect(await db.pendingDisable(agentId)).toBeUndefined();
}

describe('a campaign spend management leaves out of "paused"', () => {
  it('does not hold back the others, answers 500 with what is left, opens no breaker, and the worker finishes it', async () => {
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 250);
    const refused = ids[137]!;
    svc.sim.refuse([refused]);
    const failuresBefore = await metricValue(svc, 'circuit_breaker_events_total', 'breaker="spend_management",event="failure"');
    try {
      const response = await svc.setStatus(key, agentId, false);
      expect(response.statusCode).toBe(500);
      expect(response.json()).toMatchObject({
        type: 'urn:partner-agent-status:problem:dependency-failure',
        pausedCampaignCount: 249,
        remainingCampaignCount: 1,
      });
      expect((await db.pausedIds(agentId)).size).toBe(249);
      expect((await db.pausedIds(agentId)).has(refused)).toBe(false);
      await expectPausedInDatabaseImpliesEverywhere(serviceStores(db, svc), [...(await db.pausedIds(agentId))]);
      expect(await db.pendingDisable(agentId)).toMatchObject({ last_error: 'spend_management:not_confirmed', claim_token: null });
      expect(svc.service.breakers.spendManagement.closed).toBe(true);
      expect(await metricValue(svc, 'circuit_breaker_events_total', 'breaker="spend_management",event="failure"')).toBe(failuresBefore);
      expect(await svc.service.metrics.registry.getSingleMetricAsString('campaigns_not_confirmed_total')).toMatch(
        /dependency="spend_management"\} [1-9]/,
      );

      // Still refused: the worker retries, with backoff, and keeps the row.
      await svc.service.worker.pollNow();
      await svc.service.worker.drained();
      expect((await db.pendingDisable(agentId))?.attempts).toBeGreaterThanOrEqual(2);
    } finally {
      svc.sim.refuse([]);
    }
    await convergeByWorker(svc, agentId);
    expect((await db.pausedIds(agentId)).size).toBe(250);
    await expectPausedInDatabaseImpliesEverywhere(serviceStores(db, svc), [...(await db.pausedIds(agentId))]);
  });
});

describe('a Redis key that answers WRONGTYPE', () => {
  it('does not hold back the others; the worker pauses it once the key is fixed', async () => {
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 120);
    const broken = ids[42]!;
    await svc.redis.set(`campaign:${broken}`, 'not a hash');
    try {
      const response = await svc.setStatus(key, agentId, false);
      expect(response.statusCode).toBe(500);
      expect(response.json()).toMatchObject({ pausedCampaignCount: 119, remainingCampaignCount: 1 });
      await expectPausedInDatabaseImpliesEverywhere(serviceStores(db, svc), [...(await db.pausedIds(agentId))]);
      expect(await db.pendingDisable(agentId)).toMatchObject({ last_error: 'redis:not_confirmed' });
      expect(svc.service.breakers.redis.closed).toBe(true);
      expect(await svc.service.metrics.registry.getSingleMetricAsString('campaigns_not_confirmed_total')).toMatch(
        /dependency="redis"\} [1-9]/,
      );
    } finally {
      await svc.redis.del(`campaign:${broken}`);
    }
    await convergeByWorker(svc, agentId);
    expect((await db.pausedIds(agentId)).size).toBe(120);
    expect(await svc.pausedInRedis([broken])).toEqual([true]);
  });
});

describe('the pipeline', () => {
  it('keeps the invariant when a batch fails while others are in flight, and counts exactly', async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 1_000);
    // The 4th pause call fails while other batches are in flight (4 at a time by default).
    svc.sim.setMode('fail', { failAfter: 3, failStatus: 503 });
    try {
      const failed = await svc.setStatus(key, agentId, false);
      expect(failed.statusCode).toBe(500);
      const { pausedCampaignCount, remainingCampaignCount } = failed.json();
      expect(pausedCampaignCount + remainingCampaignCount).toBe(1_000);
      expect((await db.pausedIds(agentId)).size).toBe(pausedCampaignCount);
      await expectPausedInDatabaseImpliesEverywhere(serviceStores(db, svc), [...(await db.pausedIds(agentId))]);
    } finally {
      svc.sim.setMode('ok');
      svc.service.breakers.spendManagement.close();
    }
    const before = (await db.pausedIds(agentId)).size;
    const retried = await svc.setStatus(key, agentId, false);
    expect(retried.statusCode).toBe(200);
    expect(retried.json().pausedCampaignCount).toBe(1_000 - before);
    await expectPausedInDatabaseImpliesEverywhere(serviceStores(db, svc), [...(await db.pausedIds(agentId))]);
  });

  it('counts each campaign once across concurrent disables of many agents', async () => {
    // As many agents as one network may disable at once (DISABLES_IN_FLIGHT_PER_NETWORK, 8).
    const agents = await Promise.all(Array.from({ length: 8 }, () => db.agent(networkId)));
    await Promise.all(agents.map((agentId) => db.campaigns(agentId, 150)));
    const responses = await Promise.all(
      agents.flatMap((agentId) => [svc.setStatus(key, agentId, false), svc.setStatus(key, agentId, false)]),
    );
    expect(responses.map((r) => r.statusCode)).toEqual(Array(16).fill(200));
    expect(responses.reduce((sum, r) => sum + r.json().pausedCampaignCount, 0)).toBe(8 * 150);
    for (const agentId of agents) {
      expect((await db.pausedIds(agentId)).size).toBe(150);
      await expectPausedInDatabaseImpliesEverywhere(serviceStores(db, svc), [...(await db.pausedIds(agentId))]);
      expect(await db.pendingDisable(agentId)).toBeUndefined();
    }
  });
});

describe('breakers that fail fast for a sequential caller', () => {
  it('against a hanging spend management: the first 500 takes about one time-out, by the fifth the breaker answers at once, and it closes by itself', async () => {
    const own = await startTestService({
      partners: [{ key, networkId, name: 'durable' }],
      env: { SPEND_MANAGEMENT_TIMEOUT_MS: '1000', BREAKER_RESET_TIMEOUT_MS: '1500', WORKER_POLL_INTERVAL_MS: '60000' },
    });
    try {
      const agentId = await db.agent(networkId);
      await db.campaigns(agentId, 5);
      own.simulator.simulator.setMode('hang');
      const durations: number[] = [];
      for (let i = 0; i < 5; i++) {
        const started = performance.now();
        expect((await own.setStatus(key, agentId, false)).statusCode).toBe(500);
        durations.push(performance.now() - started);
      }
      // One attempt per call, never retried inside it: about one time-out, not two.
      expect(durations[0]).toBeGreaterThanOrEqual(950);
      expect(durations[0]).toBeLessThan(1_900);
      expect(own.service.breakers.spendManagement.opened).toBe(true);
      // Generous for a loaded CI machine; the point is "no waiting for the dependency".
      expect(durations[4]).toBeLessThan(300);
      expect(own.logs.records().filter((r) => r.msg === 'dependency failure' && r.reason === 'breaker_open').length).toBeGreaterThanOrEqual(
        1,
      );

      own.simulator.simulator.setMode('ok');
      const deadline = Date.now() + 10_000;
      let recovered = await own.setStatus(key, agentId, false);
      while (recovered.statusCode !== 200 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 250));
        recovered = await own.setStatus(key, agentId, false);
      }
      expect(recovered.statusCode).toBe(200);
      expect(own.service.breakers.spendManagement.closed).toBe(true);
      expect((await db.pausedIds(agentId)).size).toBe(5);
    } finally {
      await own.close();
    }
  });

  it('reports spend management refusing our credentials in a metric and a log line, never the token', async () => {
    const token = `tok-${newApiKey()}`;
    const own = await startTestService({
      partners: [{ key, networkId, name: 'durable' }],
      env: { SPEND_MANAGEMENT_TOKEN: token, WORKER_POLL_INTERVAL_MS: '60000' },
    });
    try {
      // The simulator expects no token at all here, so it answers 401 to ours.
      own.simulator.simulator.setMode('fail', { failStatus: 401 });
      const agentId = await db.agent(networkId);
      await db.campaigns(agentId, 2);
      expect((await own.setStatus(key, agentId, false)).statusCode).toBe(500);
      expect(await own.service.metrics.registry.getSingleMetricAsString('spend_management_auth_failures_total')).toMatch(
        /status="401"\} 1/,
      );
      expect(await metricValue(own, 'dependency_errors_total', 'dependency="spend_management",reason="unauthorized"')).toBe(1);
      expect(own.logs.records().some((r) => r.msg === 'spend management refused our credentials: check SPEND_MANAGEMENT_TOKEN')).toBe(true);
      expect(own.logs.lines.join('\n')).not.toContain(token);
      expect(await db.pendingDisable(agentId)).toMatchObject({ last_error: 'spend_management:unauthorized' });
    } finally {
      await own.close();
    }
  });
});

describe('the worker', () => {
  it("claims a due row once across two replicas, and neither repeats the other's calls", async () => {
    const second = await startTestService({
      partners: [{ key, networkId, name: 'durable' }],
      simulator: svc.simulator,
      env: { WORKER_POLL_INTERVAL_MS: '60000' },
    });
    try {
      const agentId = await db.agent(networkId);
      const ids = await db.campaigns(agentId, 300);
      svc.sim.setMode('fail', { failStatus: 503 });
      expect((await svc.setStatus(key, agentId, false)).statusCode).toBe(500);
      svc.sim.setMode('ok');
      svc.service.breakers.spendManagement.close();
      await db.pool.query('UPDATE pending_disables SET next_attempt_at = now() WHERE agent_id = $1', [agentId]);
      const callsBefore = svc.sim.requests().length;
      await Promise.all([svc.service.worker.pollNow(), second.service.worker.pollNow()]);
      await Promise.all([svc.service.worker.drained(), second.service.worker.drained()]);
      expect(await db.pendingDisable(agentId)).toBeUndefined();
      const sent = svc.sim
        .requests()
        .slice(callsBefore)
        .flatMap((r) => r.campaignIds)
        .filter((id) => ids.includes(id));
      expect(sent.length).toBe(300);
      expect(new Set(sent).size).toBe(300);
      await expectPausedInDatabaseImpliesEverywhere(serviceStores(db, svc), [...(await db.pausedIds(agentId))]);
    } finally {
      svc.sim.setMode('ok');
      await second.close();
    }
  });

  it('exports the pending figures and backs off with a cap', async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 3);
    svc.sim.setMode('fail', { failStatus: 503 });
    try {
      expect((await svc.setStatus(key, agentId, false)).statusCode).toBe(500);
      await svc.service.worker.pollNow();
      expect(await svc.service.metrics.registry.getSingleMetricAsString('pending_disables')).toMatch(/pending_disables [1-9]/);
      await svc.service.worker.drained();
      // Fail it again until base × 2^(attempts−1) is far past the cap (10 ms base, 20 ms cap here:
      // 320 ms uncapped at the 6th attempt); each failed attempt releases the row with that backoff.
      for (let round = 0; round < 50 && ((await db.pendingDisable(agentId))?.attempts ?? 0) < 6; round += 1) {
        await new Promise((resolve) => setTimeout(resolve, 25));
        await svc.service.worker.pollNow();
        await svc.service.worker.drained();
      }
      const { rows } = await db.pool.query(
        'SELECT attempts, claim_token, extract(epoch FROM next_attempt_at - now()) * 1000 AS wait_ms FROM pending_disables WHERE agent_id = $1',
        [agentId],
      );
      expect(rows[0].attempts).toBeGreaterThanOrEqual(6);
      expect(rows[0].claim_token).toBeNull();
      expect(Number(rows[0].wait_ms)).toBeLessThanOrEqual(20);
    } finally {
      svc.sim.setMode('ok');
      svc.service.breakers.spendManagement.close();
    }
    await convergeByWorker(svc, agentId);
  });
});
