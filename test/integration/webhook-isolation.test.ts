import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { unreachableUrl } from '../../src/events/address-guard.js';
import type { DeliverableEvent } from '../../src/stores/webhook-deliveries.js';
import { newApiKey, testDatabase } from '../support/data.js';
import { type DnsServer, startDnsServer } from '../support/dns-server.js';
import { startTestService, type TestService } from '../support/service.js';
import { waitFor } from '../support/wait.js';
import { partnerCall, type Receiver, type ReceiverAnswer, receiverSet, servedAfterStart } from '../support/webhook-receiver.js';

// docs/interfaces.md §14 (the 2026-11-28 additions): one network's webhooks cost another nothing.
// Each reproduction of the review holds network A's attack under way (its name server's queries
// held unanswered, its endpoints' requests hanging, with time-outs longer than the test looks)
// and checks that network B's work is done beside it: every request of B answered, every delivery
// of B made, while not one of A's lookups or attempts ended or began. B waiting behind A, or
// sharing an allowance A has used up, would leave B's work undone until A's ended, and the case
// fails. How much slower B is beside A than alone is a benchmark's figure (the `webhook-isolation`
// phase of `npm run bench`), not a test's.
const db = testDatabase();
let svc: TestService;
let dns: DnsServer;
let networkA: string;
let networkB: string;
const keyA = newApiKey();
const keyB = newApiKey();
const receivers = receiverSet();
/** A network's deliveries waiting at most, in this file. */
const maxPending = 300;
/** A network's attempts under way at once (WEBHOOK_NETWORK_MAX_IN_FLIGHT's default). */
const networkInFlight = 8;

beforeAll(async () => {
  dns = await startDnsServer();
  [networkA, networkB] = await Promise.all([db.network(), db.network()]);
  svc = await startTestService({
    partners: [
      { key: keyA, networkId: networkA, name: 'partner-a' },
      { key: keyB, networkId: networkB, name: 'partner-b' },
    ],
    env: {
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
      WEBHOOK_DNS_SERVERS: dns.server,
      // The longest a query may wait and an attempt may take: A's stay under way while B is looked at.
      WEBHOOK_DNS_TIMEOUT_MS: '10000',
      WEBHOOK_TIMEOUT_MS: '60000',
      WEBHOOK_RETRY_SCHEDULE: '1,1,1,1',
      WEBHOOK_POLL_INTERVAL_MS: '100',
      WEBHOOK_NETWORK_MAX_PENDING: String(maxPending),
      RATE_LIMIT_MAX: '0',
      // A start-up's event-loop spike on a busy machine must not shed B's requests.
      OVERLOAD_MAX_EVENT_LOOP_DELAY_MS: '60000',
    },
  });
  await servedAfterStart(svc.app, keyB);
});

afterEach(async () => {
  // A's lookups and attempts end at once: its names answer with no address, its endpoints close.
  dns.release();
  await receivers.closeAll();
  await db.pool.query('DELETE FROM webhook_deliveries');
  for (const key of [keyA, keyB]) {
    const listed = await call('GET', '/partner/webhook-endpoints', key);
    for (const { id } of (listed.json() as { endpoints: Array<{ id: string }> }).endpoints) {
      await call('DELETE', `/partner/webhook-endpoints/${id}`, key);
    }
  }
});

afterAll(async () => {
  await svc?.close();
  await dns?.close();
  await db.close();
});

const receiver = receivers.start;
const call = (method: string, url: string, key: string, payload?: unknown) => partnerCall(svc.app, method, url, key, payload);

async function register(key: string, url: string) {
  const response = await call('POST', '/partner/webhook-endpoints', key, { url });
  expect(response.statusCode, response.body).toBe(201);
  return response.json() as { id: string };
}

function event(networkId: string): DeliverableEvent {
  const id = randomUUID();
  return { id, networkId, type: 'agent.disabled', body: JSON.stringify({ id, data: { networkId } }) };
}

/** A counter's value, on the service's registry. */
async function counter(name: string): Promise<number> {
  return Number(/ (\d+)$/.exec(await svc.service.metrics.registry.getSingleMetricAsString(name))?.[1] ?? 0);
}

/** A network's deliveries claimed by the sender (attempts under way) and the attempts it has finished. */
async function inFlight(networkId: string): Promise<{ leased: number; attempted: number }> {
  const { rows } = await db.pool.query(
    `SELECT count(*) FILTER (WHERE claim_token IS NOT NULL)::int AS leased, coalesce(sum(attempts), 0)::int AS attempted
     FROM webhook_deliveries WHERE network_id = $1`,
    [networkId],
  );
  return rows[0];
}

/** One delivery of B: its event enqueued, then its arrival at B's endpoint awaited. */
function deliverToB(hook: Pick<Receiver, 'received'>) {
  return async () => {
    const before = hook.received.length;
    expect(await svc.service.webhookDeliveries.enqueue([event(networkB)])).toBe(1);
    svc.service.webhookSender.nudge();
    await waitFor(() => hook.received.length > before, { timeoutMs: 20_000, intervalMs: 2, failure: "B's delivery did not arrive" });
  };
}

/** Runs `work` `times` times in a row. */
async function repeat(times: number, work: () => Promise<unknown>): Promise<void> {
  for (let i = 0; i < times; i += 1) await work();
}

/** Runs `loops` copies of `work` over and over until stopped. */
function keepBusy(loops: number, work: (loop: number, round: number) => Promise<unknown>) {
  let stopped = false;
  const running = Array.from({ length: loops }, async (_, loop) => {
    for (let round = 0; !stopped; round += 1) await work(loop, round);
  });
  return async () => {
    stopped = true;
    await Promise.all(running);
  };
}

describe('names that never resolve', () => {
  it("A registering names that never resolve leaves B's requests answered beside its lookups", async () => {
    dns.hold();
    const agentB = await db.agent(networkB);
    await db.campaigns(agentB, 2);
    dns.set('hooks.partner-b.example', '8.8.4.4');
    const bRound = async () => {
      expect((await call('GET', `/partner/agents/${agentB}/status`, keyB)).statusCode).toBe(200);
      for (const enabled of [false, true]) {
        const changed = await svc.setStatus(keyB, agentB, enabled);
        expect(changed.statusCode, changed.body).toBe(200);
      }
      const made = await register(keyB, 'https://hooks.partner-b.example/agent-status');
      expect((await call('DELETE', `/partner/webhook-endpoints/${made.id}`, keyB)).statusCode).toBe(204);
    };
    const answers = new Map<number, number>();
    const stop = keepBusy(8, async (loop, round) => {
      const response = await call('POST', '/partner/webhook-endpoints', keyA, {
        url: `https://n${loop}-${round}.never.partner-a.example/`,
      });
      answers.set(response.statusCode, (answers.get(response.statusCode) ?? 0) + 1);
      if (response.statusCode === 400) expect(response.json().detail).toBe(unreachableUrl);
      // Refused at once while 4 are under way: the attacker tries again a moment later.
      if (response.statusCode === 429) await new Promise((resolve) => setTimeout(resolve, 50));
    });
    try {
      // A's 4 lookups (WEBHOOK_DNS_LOOKUPS_PER_NETWORK), an A and an AAAA query each, held; its other registrations refused.
      await waitFor(() => dns.held >= 8 && (answers.get(429) ?? 0) > 0, {
        timeoutMs: 10_000,
        intervalMs: 10,
        failure: () => `A's lookups under way: ${dns.held} queries held, answers ${JSON.stringify([...answers])}`,
      });
      const [queriesOfA, heldOfA] = [dns.unanswered, dns.held];
      await repeat(5, bRound);
      // B's requests, its own lookups among them, were answered while A's lookups stayed under way:
      // none of A's ended (a query timed out would be asked again, a slot freed taken by another).
      expect([dns.unanswered, dns.held]).toEqual([queriesOfA, heldOfA]);
      expect(answers.get(201)).toBeUndefined();
      expect(answers.get(400)).toBeUndefined();
    } finally {
      const stopped = stop();
      dns.release();
      await stopped;
    }
    // Released, A's lookups ended with no address: its registrations were refused as unreachable.
    expect(answers.get(400)).toBeGreaterThan(0);
    expect(answers.get(201)).toBeUndefined();
    expect(await counter('webhook_dns_lookups_refused_total')).toBeGreaterThan(0);
  });

  it("A's endpoint names that stopped answering leave B's deliveries made beside A's attempts", async () => {
    dns.hold();
    const hookA = await receiver();
    const hookB = await receiver();
    for (const i of [1, 2, 3]) dns.set(`a${i}.partner-a.example`, '127.0.0.1');
    dns.set('b.partner-b.example', '127.0.0.1');
    for (const i of [1, 2, 3]) await register(keyA, `http://a${i}.partner-a.example:${hookA.port}/hook`);
    await register(keyB, `http://b.partner-b.example:${hookB.port}/hook`);
    const toB = deliverToB(hookB);
    await toB();

    for (const i of [1, 2, 3]) dns.forget(`a${i}.partner-a.example`);
    await svc.service.webhookDeliveries.enqueue(Array.from({ length: 60 }, () => event(networkA)));
    svc.service.webhookSender.nudge();
    // A's attempts, as many as its network may have under way, each on a connection of its own
    // waiting for its name (an A and an AAAA query).
    let state = { leased: 0, attempted: 0 };
    await waitFor(
      async () => {
        state = await inFlight(networkA);
        return state.leased === networkInFlight && dns.held === 2 * networkInFlight;
      },
      { timeoutMs: 10_000, intervalMs: 10, failure: () => `A's attempts ${JSON.stringify(state)}, queries held ${dns.held}` },
    );
    const queriesOfA = dns.unanswered;
    await repeat(30, toB);
    // B's 30 deliveries were made while A's attempts stayed under way: none ended, none began.
    expect(await inFlight(networkA)).toEqual({ leased: networkInFlight, attempted: 0 });
    expect(dns.unanswered).toBe(queriesOfA);
    expect(hookA.received).toHaveLength(0);
  });
});

describe("slow endpoints on another network's host", () => {
  it("A's hanging endpoints on B's host leave B's deliveries made beside them", async () => {
    // One host routes tenants by path, as integration platforms do: A's paths never answer.
    const shared = await receiver({ byPath: (path): ReceiverAnswer => (path.startsWith('/a/') ? 'hang' : 200) });
    for (let i = 0; i < 6; i += 1) await register(keyA, `http://127.0.0.1:${shared.port}/a/${i}`);
    await register(keyB, `http://127.0.0.1:${shared.port}/b`);
    const toB = deliverToB({
      get received() {
        return shared.received.filter((r) => r.path === '/b');
      },
    });
    await toB();

    await svc.service.webhookDeliveries.enqueue(Array.from({ length: 40 }, () => event(networkA)));
    svc.service.webhookSender.nudge();
    await waitFor(() => shared.hanging >= networkInFlight, {
      timeoutMs: 10_000,
      intervalMs: 10,
      failure: "A's attempts did not reach the host",
    });
    await repeat(30, toB);
    // A's attempts were all still hanging, none finished and none more began: B's went out beside them, not after them.
    expect(shared.hanging).toBe(networkInFlight);
    expect(shared.received.filter((r) => r.path.startsWith('/a/'))).toHaveLength(networkInFlight);
    expect(await inFlight(networkA)).toEqual({ leased: networkInFlight, attempted: 0 });
  });
});

describe('a flood of deliveries', () => {
  it("A's flood towards endpoints that never answer stays within its bounds and leaves B's deliveries made beside it", async () => {
    const hangs = await receiver({ otherwise: 'hang' });
    const hookB = await receiver();
    for (let i = 0; i < 3; i += 1) await register(keyA, `${hangs.url}/${i}`);
    await register(keyB, hookB.url);
    const toB = deliverToB(hookB);
    await toB();

    const dropped = () => counter('webhook_deliveries_dropped_total');
    const droppedBefore = await dropped();
    // 3,000 changes of A, each an event for its three endpoints, as the fan-out hands them over.
    let made = 0;
    for (let batch = 0; batch < 30; batch += 1) {
      made += await svc.service.webhookDeliveries.enqueue(Array.from({ length: 100 }, () => event(networkA)));
    }
    svc.service.webhookSender.nudge();
    await waitFor(() => hangs.hanging >= networkInFlight, { timeoutMs: 10_000, intervalMs: 10, failure: "A's attempts did not start" });
    for (let i = 0; i < 30; i += 1) {
      await svc.service.webhookDeliveries.enqueue(Array.from({ length: 20 }, () => event(networkA)));
      await toB();
    }
    const { rows } = await db.pool.query("SELECT count(*)::int AS n FROM webhook_deliveries WHERE network_id = $1 AND state = 'pending'", [
      networkA,
    ]);
    expect(made).toBeLessThanOrEqual(maxPending);
    expect(rows[0].n).toBeLessThanOrEqual(maxPending);
    expect((await dropped()) - droppedBefore).toBeGreaterThanOrEqual(9_000 + 30 * 60 - maxPending);
    // A's three endpoints could take 12 attempts at once: its bound of 8 held the rest back, and
    // B's 30 deliveries went out while those 8 hung, none of them ended and none more began.
    expect(await counter('webhook_network_in_flight_bound_total')).toBeGreaterThan(0);
    expect(hangs.hanging).toBe(networkInFlight);
    expect(hangs.received).toHaveLength(networkInFlight);
    expect(await inFlight(networkA)).toEqual({ leased: networkInFlight, attempted: 0 });
  });

  it("the relay's batches hold the bound too: a network at its bound gets no deliveries from a relayed batch, counted as dropped", async () => {
    const hangs = await receiver({ otherwise: 'hang' });
    const hookB = await receiver();
    const endpointA = await register(keyA, hangs.url);
    await register(keyB, hookB.url);
    // A has as many deliveries waiting as it may, none due within the test.
    await db.pool.query(
      `INSERT INTO webhook_deliveries (endpoint_id, network_id, event_id, event_type, body, next_attempt_at)
       SELECT $1, $2, gen_random_uuid(), 'agent.disabled', '{}', now() + interval '1 hour' FROM generate_series(1, $3::int)`,
      [endpointA.id, networkA, maxPending],
    );
    const dropped = () => counter('webhook_deliveries_dropped_total');
    const droppedBefore = await dropped();
    const [agentA, agentB] = await Promise.all([db.agent(networkA), db.agent(networkB)]);
    // Each change writes its events; the relay takes them in a batch and makes the deliveries.
    for (const [key, agentId] of [
      [keyA, agentA],
      [keyB, agentB],
    ] as const) {
      const disabled = await svc.setStatus(key, agentId, false);
      expect(disabled.statusCode, disabled.body).toBeLessThan(300);
    }
    let droppedNow = droppedBefore;
    await waitFor(
      async () => {
        droppedNow = await dropped();
        return droppedNow > droppedBefore && hookB.received.length > 0;
      },
      { timeoutMs: 15_000, intervalMs: 50, failure: () => `dropped ${droppedBefore} → ${droppedNow}, B received ${hookB.received.length}` },
    );
    const { rows } = await db.pool.query(
      'SELECT count(*)::int AS n, count(*) FILTER (WHERE body LIKE $2)::int AS relayed FROM webhook_deliveries WHERE network_id = $1',
      [networkA, `%${agentA}%`],
    );
    expect(rows[0]).toEqual({ n: maxPending, relayed: 0 });
    const told = svc.logs
      .records()
      .find((record) => record.msg?.toString().startsWith('webhook deliveries not made') && record.networkId === networkA);
    expect(told).toMatchObject({ limit: maxPending, count: expect.any(Number) });
    // B, in the same batches, was not held back by A's bound.
    expect(hookB.received.some((got) => got.body.includes(agentB))).toBe(true);
  });

  it('prunes finished deliveries far faster than the fan-out can write them', async () => {
    const hook = await receiver();
    const endpoint = await register(keyA, hook.url);
    await db.pool.query(
      `INSERT INTO webhook_deliveries (endpoint_id, network_id, event_id, event_type, body, state, updated_at)
       SELECT $1, $2, gen_random_uuid(), 'agent.disabled', '{}', 'succeeded', now() - interval '31 days' FROM generate_series(1, 6000)`,
      [endpoint.id, networkA],
    );
    let left = -1;
    // One round of the sender's upkeep (every 10 s) deletes them all, where 500 a minute took 12 minutes.
    await waitFor(
      async () => {
        left = (await db.pool.query('SELECT count(*)::int AS n FROM webhook_deliveries')).rows[0].n as number;
        return left === 0;
      },
      { timeoutMs: 25_000, intervalMs: 200, failure: () => `finished deliveries left: ${left}` },
    );
  });
});

describe('the OpenAPI document', () => {
  it('serves the document with an ETag and caching headers, and 304 to a client that holds it', async () => {
    const first = await svc.app.inject({ method: 'GET', url: '/partner/openapi.json' });
    expect(first.statusCode).toBe(200);
    expect(first.headers['cache-control']).toBe('public, max-age=300');
    const etag = String(first.headers.etag);
    expect(etag).toMatch(/^"[A-Za-z0-9_-]{27}"$/);
    const again = await svc.app.inject({ method: 'GET', url: '/partner/openapi.json', headers: { 'if-none-match': etag } });
    expect(again.statusCode).toBe(304);
    expect(again.body).toBe('');
    const other = await svc.app.inject({ method: 'GET', url: '/partner/openapi.json?version=2026-11-21' });
    expect(other.headers.etag).not.toBe(etag);
    expect(JSON.parse(first.body)).toMatchObject({ openapi: '3.1.0' });
  });
});
