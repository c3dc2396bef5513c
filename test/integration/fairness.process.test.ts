// The replica's spend-management capacity is shared fairly (docs/interfaces.md §10), on the built
// service against a simulator that answers slowly: a network's small disable is served beside
// another network's big ones and beside the worker's backlog, not after them (told by the order in
// which the simulator received the calls, not by times), and counts stay exact with many batches
// in flight and failures among them. How much slower the small disable is beside the big ones than
// alone is the `fairness` row of `npm run bench`, not a test's figure.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { postStatus } from '../support/partner.js';
import { startServiceProcess } from '../support/process.js';
import { processEnvironment } from '../support/process-environment.js';
import { waitFor } from '../support/wait.js';

const db = testDatabase();
const a = { key: newApiKey(), networkId: '', name: 'network-a' };
const b = { key: newApiKey(), networkId: '', name: 'network-b' };
let environment: Awaited<ReturnType<typeof processEnvironment>>;
let service: Awaited<ReturnType<typeof startServiceProcess>>;
/**
 * How long the simulator takes to answer a call in the two ordering cases: long enough that few of
 * A's calls start while B's request does its work before its first call (16 slots: 40 a second).
 */
const callMs = 400;

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
  const response = await postStatus(service.baseUrl, partner.key, agentId, false);
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

async function agentWith(partner: typeof a, campaigns: number): Promise<string> {
  const agentId = await db.agent(partner.networkId);
  await db.campaigns(agentId, campaigns);
  return agentId;
}

describe('fair sharing of spend-management calls', () => {
  it("network B's disable beside network A's eight big ones is served beside them, not after them", { timeout: 120_000 }, async () => {
    const sim = environment.simulator.simulator;
    const bAgent = await agentWith(b, 400);
    const aAgents = await Promise.all(Array.from({ length: 8 }, () => agentWith(a, 2_000)));
    const calls = callsOf(sim);
    sim.setMode('slow', { delayMs: callMs });
    try {
      const started = calls.count();
      const load = aAgents.map((agentId) => disable(a, agentId));
      // A's calls fill the replica's 16 slots; 144 more of A's wait for them.
      await waitFor(() => calls.count() - started >= 16, { timeoutMs: 30_000, intervalMs: 10, failure: "A's disables made no calls" });
      const sent = calls.mark();
      const beside = await disable(b, bAgent);
      expect(beside).toMatchObject({ status: 200, body: { pausedCampaignCount: 400 } });
      const aAnswers = await Promise.all(load);
      expect(aAnswers.map((answer) => answer.status)).toEqual(aAgents.map(() => 200));
      // Shared fairly, B's first call took one of the next slots to free, while A still had calls
      // to send; in one queue it would have waited for every call of A's queued before it (111 of
      // them when tried on 2026-11-30).
      const order = await calls.order(aAgents, [bAgent], sent);
      expect(order.second).toBe(4);
      expect(order.firstBeforeSecond, JSON.stringify(order)).toBeLessThan(16);
      expect(order.firstAfterSecond, JSON.stringify(order)).toBeGreaterThan(0);
    } finally {
      sim.setMode('ok');
    }
  });

  it("a request's disable is served beside the worker's backlog, not after it", { timeout: 120_000 }, async () => {
    const sim = environment.simulator.simulator;
    const bAgent = await agentWith(b, 400);
    const backlog = await Promise.all(Array.from({ length: 4 }, () => agentWith(a, 4_000)));
    const calls = callsOf(sim);
    try {
      // The backlog: disables recorded, then left to the worker (their requests fail at once).
      sim.setMode('fail');
      for (const agentId of backlog) expect((await disable(a, agentId)).status).toBe(500);
      sim.setMode('slow', { delayMs: callMs });
      // The worker's runs have calls in flight (16 slots), 160 calls in all.
      const started = calls.count();
      await waitFor(() => calls.count() - started >= 16, { timeoutMs: 30_000, intervalMs: 10, failure: 'the worker made no calls' });
      const sent = calls.mark();
      const beside = await disable(b, bAgent);
      expect(beside).toMatchObject({ status: 200, body: { pausedCampaignCount: 400 } });
      // The worker finishes its backlog all the same.
      await waitFor(
        async () => (await db.pool.query('SELECT 1 FROM pending_disables WHERE agent_id = ANY($1)', [backlog])).rowCount === 0,
        {
          timeoutMs: 60_000,
          intervalMs: 100,
          failure: 'the worker did not finish its backlog',
        },
      );
      // B's first call took one of the next slots to free, while the backlog still had calls to
      // send; queued behind the worker's calls it would have waited for all those queued before it
      // (32 when tried on 2026-11-30).
      const order = await calls.order(backlog, [bAgent], sent);
      expect(order.second).toBe(4);
      expect(order.firstBeforeSecond, JSON.stringify(order)).toBeLessThan(16);
      expect(order.firstAfterSecond, JSON.stringify(order)).toBeGreaterThan(0);
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
    // The worker, when it paused the last of them, counts them a moment after its mark committed.
    let counted = 0;
    await waitFor(
      async () => {
        counted = (await pausedCounter()) - countedBefore;
        return counted >= 3_000;
      },
      { timeoutMs: 10_000, intervalMs: 50, failure: () => `campaigns_paused_total counted ${counted} of 3,000` },
    );
    expect(counted).toBe(3_000);
  });
});

/** The simulator's calls: how many it has received, and in which order two sets of agents' calls came. */
function callsOf(sim: typeof environment.simulator.simulator) {
  let total = 0;
  let last: unknown;
  return {
    /** Calls received so far (the simulator keeps the last 1,000; this counts past them). */
    count(): number {
      const requests = sim.requests();
      const at = last === undefined ? -1 : requests.lastIndexOf(last as (typeof requests)[number]);
      total += requests.length - (at + 1);
      last = requests.at(-1);
      return total;
    },
    /** The last call received now, to count from it in `order`. */
    mark(): unknown {
      return sim.requests().at(-1);
    },
    /**
     * The calls of `first`'s and `second`'s agents among those the simulator keeps: how many of
     * `second`'s, how many of `first`'s came after the call `since` (a `mark`) and before the
     * first of `second`'s, and how many after the last of `second`'s.
     */
    async order(
      first: string[],
      second: string[],
      since: unknown,
    ): Promise<{ first: number; second: number; firstBeforeSecond: number; firstAfterSecond: number }> {
      const owner = new Map<string, 'first' | 'second'>();
      const { rows } = await db.pool.query('SELECT campaign_id, agent_id = ANY($2) AS second FROM campaigns WHERE agent_id = ANY($1)', [
        [...first, ...second],
        second,
      ]);
      for (const row of rows) owner.set(row.campaign_id, row.second ? 'second' : 'first');
      const requests = sim.requests();
      const sides = requests.map((request) => owner.get(request.campaignIds[0]!));
      const [marked, firstOfSecond, lastOfSecond] = [
        requests.lastIndexOf(since as (typeof requests)[number]),
        sides.indexOf('second'),
        sides.lastIndexOf('second'),
      ];
      const firsts = (from: number, to: number) => sides.slice(from, to).filter((side) => side === 'first').length;
      return {
        first: firsts(0, sides.length),
        second: sides.filter((side) => side === 'second').length,
        firstBeforeSecond: firsts(marked + 1, firstOfSecond),
        firstAfterSecond: firsts(lastOfSecond + 1, sides.length),
      };
    },
  };
}

/** campaigns_paused_total of network B's key, from the service's /metrics. */
async function pausedCounter(): Promise<number> {
  const text = await (await fetch(`${service.metricsUrl}/metrics`)).text();
  return Number(/^campaigns_paused_total\{partner="network-b"\} (\d+)/m.exec(text)?.[1] ?? 0);
}
