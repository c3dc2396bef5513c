// The replica's spend-management capacity is shared fairly (docs/interfaces.md §10), measured on the
// built service against a simulator that answers in 100 ms: a network's small disable beside
// another network's big ones, beside the worker's backlog, and exact counts with many batches in
// flight and failures among them. Ratios with a generous margin, never absolute times.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { postStatus } from '../support/partner.js';
import { startServiceProcess } from '../support/process.js';
import { processEnvironment } from '../support/process-environment.js';

const db = testDatabase();
const a = { key: newApiKey(), networkId: '', name: 'network-a' };
const b = { key: newApiKey(), networkId: '', name: 'network-b' };
let environment: Awaited<ReturnType<typeof processEnvironment>>;
let service: Awaited<ReturnType<typeof startServiceProcess>>;

beforeAll(async () => {
  a.networkId = await db.network();
  b.networkId = await db.network();
  environment = await processEnvironment([a, b], {
    OTEL_SDK_DISABLED: 'true',
    RATE_LIMIT_MAX: '0',
    SPEND_MANAGEMENT_MAX_CONCURRENCY: '16',
    SPEND_MANAGEMENT_TIMEOUT_MS: '5000',
    WORKER_POLL_INTERVAL_MS: '100',
    WORKER_BACKOFF_BASE_MS: '50',
    WORKER_BACKOFF_MAX_MS: '100',
    BREAKER_RESET_TIMEOUT_MS: '200',
  });
  service = await startServiceProcess(environment.env);
});

afterAll(async () => {
  await service?.stop();
  await environment?.close();
  await db.close();
});

async function disable(partner: typeof a, agentId: string) {
  const started = performance.now();
  const response = await postStatus(service.baseUrl, partner.key, agentId, false);
  return { status: response.status, body: (await response.json()) as Record<string, unknown>, ms: performance.now() - started };
}

async function agentWith(partner: typeof a, campaigns: number): Promise<string> {
  const agentId = await db.agent(partner.networkId);
  await db.campaigns(agentId, campaigns);
  return agentId;
}

describe('fair sharing of spend-management calls', () => {
  // Ratios of latencies on a shared machine: the retries guard against another process's burst only.
  it("network B's disable beside network A's eight big ones takes at most twice as long as alone", {
    timeout: 120_000,
    retry: 2,
  }, async () => {
    const sim = environment.simulator.simulator;
    const bAlone = await agentWith(b, 400);
    const bBeside = await agentWith(b, 400);
    const aAgents = await Promise.all(Array.from({ length: 8 }, () => agentWith(a, 1_000)));
    sim.setMode('slow', { delayMs: 100 });
    try {
      const alone = await disable(b, bAlone);
      expect(alone.status).toBe(200);
      const load = aAgents.map((agentId) => disable(a, agentId));
      await new Promise((resolve) => setTimeout(resolve, 300));
      const beside = await disable(b, bBeside);
      expect(beside).toMatchObject({ status: 200, body: { pausedCampaignCount: 400 } });
      const aAnswers = await Promise.all(load);
      expect(aAnswers.map((answer) => answer.status)).toEqual(aAgents.map(() => 200));
      // A's load alone is 80 calls of 100 ms on 16 slots: B behind it in one queue would wait ~0.5 s more.
      expect(beside.ms / alone.ms).toBeLessThan(2);
    } finally {
      sim.setMode('ok');
    }
  });

  it("a request's disable does not wait behind the worker's backlog", { timeout: 120_000, retry: 2 }, async () => {
    const sim = environment.simulator.simulator;
    const bAlone = await agentWith(b, 400);
    const bBeside = await agentWith(b, 400);
    const backlog = await Promise.all(Array.from({ length: 4 }, () => agentWith(a, 1_500)));
    sim.setMode('slow', { delayMs: 100 });
    try {
      const alone = await disable(b, bAlone);
      // The backlog: disables recorded, then left to the worker (their requests fail at once).
      sim.setMode('fail');
      for (const agentId of backlog) expect((await disable(a, agentId)).status).toBe(500);
      sim.setMode('slow', { delayMs: 100 });
      // Wait until the worker's runs have calls in flight.
      const calls = sim.requests().length;
      while (sim.requests().length < calls + 16) await new Promise((resolve) => setTimeout(resolve, 20));
      const beside = await disable(b, bBeside);
      expect(beside).toMatchObject({ status: 200, body: { pausedCampaignCount: 400 } });
      // Behind the backlog's 6,000 campaigns (60 calls of 100 ms on 16 slots) it would take 0.4 s more.
      expect(beside.ms / alone.ms).toBeLessThan(2.5);
      // The worker finishes its backlog all the same.
      const end = Date.now() + 60_000;
      while ((await db.pool.query('SELECT 1 FROM pending_disables WHERE agent_id = ANY($1)', [backlog])).rowCount! > 0) {
        if (Date.now() > end) throw new Error('the worker did not finish its backlog');
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    } finally {
      sim.setMode('ok');
    }
  });

  it('counts exactly with many batches in flight and failures among them, and paused in the database implies paused everywhere', async () => {
    const sim = environment.simulator.simulator;
    const agentId = await agentWith(b, 3_000);
    const countedBefore = await pausedCounter();
    sim.setMode('fail', { failAfter: 11 });
    const first = await disable(b, agentId);
    sim.setMode('ok');
    expect(first.status).toBe(500);
    const pausedFirst = (await db.pausedIds(agentId)).size;
    expect(first.body).toMatchObject({ pausedCampaignCount: pausedFirst, remainingCampaignCount: 3_000 - pausedFirst });
    expect(pausedFirst).toBeGreaterThan(0);
    expect(pausedFirst).toBeLessThan(3_000);
    const inDatabase = [...(await db.pausedIds(agentId))];
    expect(inDatabase.filter((id) => !sim.isPaused(id))).toEqual([]);
    // Repeats (and the worker, whichever claims first) pause the rest; nothing is counted twice.
    let answered = first.body.pausedCampaignCount as number;
    for (let attempt = 0; attempt < 50; attempt += 1) {
      await new Promise((resolve) => setTimeout(resolve, 250)); // the breaker half-opens
      const repeat = await disable(b, agentId);
      answered += (repeat.body.pausedCampaignCount as number | undefined) ?? 0;
      if (repeat.status === 200 && (await db.pausedIds(agentId)).size === 3_000) break;
    }
    expect((await db.pausedIds(agentId)).size).toBe(3_000);
    expect(answered).toBeLessThanOrEqual(3_000);
    expect((await pausedCounter()) - countedBefore).toBe(3_000);
  });
});

/** campaigns_paused_total of network B's key, from the service's /metrics. */
async function pausedCounter(): Promise<number> {
  const text = await (await fetch(`${service.metricsUrl}/metrics`)).text();
  return Number(/^campaigns_paused_total\{partner="network-b"\} (\d+)/m.exec(text)?.[1] ?? 0);
}
