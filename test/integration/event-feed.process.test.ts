// The partner events feed (docs/interfaces.md §17) on the built service with real stores: pages
// equal to the events on NATS and at a webhook endpoint, byte for byte; the network's own events
// only; live streams within a second of the commit; Last-Event-ID resumes exactly once; five
// streams a network; a draining replica ends its streams and a client resumes on another; a cursor
// past the retention is a 410.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { type FeedStream, openStream, readAllPages } from '../support/event-feed-client.js';
import { type NatsServer, startNatsServer } from '../support/nats-server.js';
import { startServiceProcess } from '../support/process.js';
import { processEnvironment } from '../support/process-environment.js';
import { waitFor } from '../support/wait.js';
import { type Receiver, startReceiver } from '../support/webhook-receiver.js';

const db = testDatabase();
const key = newApiKey();
const otherKey = newApiKey();
let networkId: string;
let otherNetworkId: string;
let nats: NatsServer;
let receiver: Receiver;
let environment: Awaited<ReturnType<typeof processEnvironment>>;
type ServiceProcess = Awaited<ReturnType<typeof startServiceProcess>>;
const replicas: ServiceProcess[] = [];
let service: ServiceProcess;
const streams: FeedStream[] = [];

beforeAll(async () => {
  nats = await startNatsServer();
  receiver = await startReceiver();
  networkId = await db.network();
  otherNetworkId = await db.network();
  environment = await processEnvironment(
    [
      { key, networkId, name: 'feed-partner' },
      { key: otherKey, networkId: otherNetworkId, name: 'other-partner' },
    ],
    {
      OTEL_SDK_DISABLED: 'true',
      DRAIN_DELAY_MS: '200',
      RATE_LIMIT_MAX: '100000',
      EVENTS_NATS_URL: nats.url,
      EVENTS_CREATE_STREAM: 'true',
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
      WEBHOOK_POLL_INTERVAL_MS: '100',
      EVENTS_FEED_HEARTBEAT_MS: '1000',
      // A busy test machine is not an overloaded service here.
      OVERLOAD_MAX_EVENT_LOOP_DELAY_MS: '5000',
    },
  );
  service = await replica();
  // Retried while the fresh replica sheds (a busy machine): a partner would.
  const created = await notShed(() =>
    fetch(`${service.baseUrl}/partner/webhook-endpoints`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': key },
      body: JSON.stringify({ url: receiver.url }),
    }),
  );
  expect(created.status).toBe(201);
}, 60_000);

afterAll(async () => {
  await Promise.all(streams.map((stream) => stream.close()));
  await Promise.all(replicas.map((started) => started.stop()));
  await environment?.close();
  await receiver?.close();
  await nats?.close();
  await db.close();
});

async function replica(): Promise<ServiceProcess> {
  const started = await startServiceProcess(environment.env);
  replicas.push(started);
  return started;
}

async function stream(baseUrl: string, options: Parameters<typeof openStream>[2] = {}, partnerKey = key): Promise<FeedStream> {
  const opened = await openStream(baseUrl, partnerKey, options);
  streams.push(opened);
  return opened;
}

/** A change through the API; when it was answered (its commit was before). */
async function change(baseUrl: string, agentId: string, enabled: boolean, partnerKey = key): Promise<number> {
  const response = await fetch(`${baseUrl}/partner/agents/status`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': partnerKey },
    body: JSON.stringify({ agentId, enabled }),
  });
  expect(response.status).toBe(200);
  await response.arrayBuffer();
  return Date.now();
}

/** The agents' events in the view, in the order of (batch, position) is not knowable here: their ids by agent, in position order. */
async function eventIdsOf(agentIds: string[]): Promise<string[]> {
  const { rows } = await db.pool.query('SELECT event_id::text AS id FROM agent_events WHERE agent_id = ANY ($1) ORDER BY position', [
    agentIds,
  ]);
  return rows.map((row) => row.id);
}

/** The answer once the replica stops shedding (a fresh replica on a busy machine answers 503 with Retry-After). */
async function notShed(request: () => Promise<Response>): Promise<Response> {
  return waitFor(
    async () => {
      const response = await request();
      if (response.status !== 503) return response;
      await response.arrayBuffer();
      return undefined;
    },
    { timeoutMs: 20_000, intervalMs: 500, failure: 'the replica kept shedding' },
  );
}

/** Waits until a stream and the one that resumed it hold `count` messages together. */
async function bothHold(first: FeedStream, resumed: FeedStream, count: number): Promise<void> {
  await waitFor(() => first.messages.length + resumed.messages.length >= count, {
    timeoutMs: 10_000,
    intervalMs: 50,
    failure: () => `${first.messages.length + resumed.messages.length} of ${count}`,
  });
}

const ids = (messages: Array<{ data: string }>) => messages.map((message) => JSON.parse(message.data).id as string);
const repeated = (list: string[]) => list.filter((id, index) => list.indexOf(id) !== index);

describe('pages', () => {
  it("300 changes of 3 agents read back in pages equal the events on NATS and at the webhook endpoint, id for id and byte for byte, each agent's in order; another network's never appear", async () => {
    const agents = [await db.agent(networkId), await db.agent(networkId), await db.agent(networkId)];
    const otherAgent = await db.agent(otherNetworkId);
    const before = await readAllPages(service.baseUrl, key);
    for (let i = 0; i < 300; i += 1) {
      await change(service.baseUrl, agents[i % 3]!, i % 6 >= 3);
      if (i % 10 === 0) await change(service.baseUrl, otherAgent, i % 20 === 0, otherKey);
    }
    const expected = await eventIdsOf(agents);
    expect(expected.length).toBeGreaterThanOrEqual(300);

    // Everything is in the feed, and on NATS and at the endpoint (the relay's batches feed all three).
    const read = await waitFor(
      async () => {
        const pages = await readAllPages(service.baseUrl, key, { after: before.cursor, limit: 37 });
        return pages.events.length >= expected.length ? pages : undefined;
      },
      { timeoutMs: 20_000, intervalMs: 200, failure: 'the feed did not hold every event' },
    );
    const pageIds = read.events.map((event) => event.id);
    expect(repeated(pageIds)).toEqual([]);
    expect(new Set(pageIds)).toEqual(new Set(expected));
    expect(read.events.every((event) => event.data.networkId === networkId)).toBe(true);
    // Each agent's events in its commit order (the order of their positions).
    for (const agentId of agents) {
      expect(read.events.filter((event) => event.data.agentId === agentId).map((event) => event.id)).toEqual(await eventIdsOf([agentId]));
    }
    // The order is stable: the same cursor read again gives the same bytes.
    const again = await readAllPages(service.baseUrl, key, { after: before.cursor, limit: 37 });
    expect(again.bodies.slice(0, read.bodies.length - 1)).toEqual(read.bodies.slice(0, read.bodies.length - 1));

    // The same bytes as NATS's, in the same order per agent.
    const onNats = await waitFor(
      async () => {
        const messages = (await nats.messages('PARTNER_AGENT_STATUS')).filter((m) => agents.includes(m.event.data.agentId));
        return messages.length >= expected.length ? messages : undefined;
      },
      { timeoutMs: 20_000, intervalMs: 200, failure: 'NATS did not get every event' },
    );
    // Each event's bytes as NATS holds them are in a page, as they are.
    const served = read.bodies.join('\n');
    expect(new Set(onNats.map((m) => m.event.id))).toEqual(new Set(pageIds));
    for (const agentId of agents) {
      const agentOrder = (list: Array<{ id: string; agentId: string }>) => list.filter((e) => e.agentId === agentId).map((e) => e.id);
      expect(agentOrder(onNats.map((m) => ({ id: m.event.id, agentId: m.event.data.agentId })))).toEqual(
        agentOrder(read.events.map((e) => ({ id: e.id, agentId: e.data.agentId }))),
      );
    }
    expect(onNats.filter((m) => !served.includes(m.data)).map((m) => m.event.id)).toEqual([]);

    // And the webhook endpoint's bodies.
    const delivered = await waitFor(
      () => {
        const bodies = receiver.received.map((r) => r.body).filter((body) => agents.includes(JSON.parse(body).subject));
        return bodies.length >= expected.length ? bodies : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 200, failure: 'the webhook endpoint did not get every event' },
    );
    expect(new Set(delivered.map((body) => JSON.parse(body).id as string))).toEqual(new Set(pageIds));
    expect(delivered.filter((body) => !served.includes(body))).toEqual([]);

    // The other network reads only its own.
    const other = await readAllPages(service.baseUrl, otherKey, { after: before.cursor });
    expect(other.events.length).toBeGreaterThan(0);
    expect(other.events.every((event) => event.data.networkId === otherNetworkId)).toBe(true);
  }, 180_000);
});

describe('streams', () => {
  // A test that failed half-way leaves no stream open behind it (the next ones count streams).
  afterEach(async () => {
    await Promise.all(streams.splice(0).map((opened) => opened.close()));
  });

  it('a stream opened before 100 changes sees each within 1 s of its commit, with comments between', async () => {
    const agentId = await db.agent(networkId);
    const live = await stream(service.baseUrl, { after: (await readAllPages(service.baseUrl, key)).cursor, query: `agentId=${agentId}` });
    expect(live.response.status).toBe(200);
    expect(live.response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const answered: number[] = [];
    for (let i = 0; i < 100; i += 1) answered.push(await change(service.baseUrl, agentId, i % 2 === 1));
    const changes = () => live.messages.filter((m) => m.event !== 'partner-agent-status.agent.disable.completed');
    await waitFor(() => changes().length >= 100, {
      timeoutMs: 10_000,
      intervalMs: 50,
      failure: () => `${changes().length} of 100 streamed`,
    });
    const lags = changes().map((message, i) => message.at - answered[i]!);
    // When it fails, what share was the relay's: from each answer to its batch's recording, and
    // from the recording to the stream (the feed's own part).
    const batchOf = (id: string) => Buffer.from(id, 'base64url').toString().split(':')[1]!;
    const { rows } = await db.pool.query(
      'SELECT id::text, (extract(epoch FROM created_at) * 1000)::float8 AS at FROM event_batches WHERE id = ANY ($1::bigint[])',
      [changes().map((m) => batchOf(m.id))],
    );
    const recordedAt = new Map(rows.map((row) => [row.id as string, row.at as number]));
    const worst = (values: number[]) => Math.round(Math.max(...values));
    const relayPart = worst(changes().map((m, i) => recordedAt.get(batchOf(m.id))! - answered[i]!));
    const feedPart = worst(changes().map((m) => m.at - recordedAt.get(batchOf(m.id))!));
    expect(
      Math.max(...lags),
      `worst lag; answer to batch recorded ${relayPart} ms, batch recorded to the stream ${feedPart} ms`,
    ).toBeLessThan(1_000);
    expect(changes().map((m) => JSON.parse(m.data).data.changeId)).toEqual(Array.from({ length: 100 }, (_, i) => i + 1));
    // id: is a cursor a page read accepts; event: is the CloudEvent's type.
    const last = live.messages.at(-1)!;
    expect(last.event).toBe(JSON.parse(last.data).type);
    const after = await fetch(`${service.baseUrl}/partner/events?after=${last.id}&agentId=${agentId}`, { headers: { 'x-api-key': key } });
    expect(((await after.json()) as { events: unknown[] }).events).toEqual([]);
    await waitFor(() => live.comments.length >= 2, { timeoutMs: 5_000, intervalMs: 50, failure: 'no keep-alive comment' });
    await live.close();
  }, 60_000);

  it('a stream cut and resumed with Last-Event-ID during 200 changes gets each exactly once', async () => {
    const agentId = await db.agent(networkId);
    const query = `agentId=${agentId}`;
    const first = await stream(service.baseUrl, { after: (await readAllPages(service.baseUrl, key)).cursor, query });
    const making = (async () => {
      for (let i = 0; i < 200; i += 1) await change(service.baseUrl, agentId, i % 2 === 1);
    })();
    await waitFor(() => first.messages.length >= 40, { timeoutMs: 10_000, intervalMs: 10, failure: 'nothing streamed' });
    await first.close();
    const resumed = await stream(service.baseUrl, { lastEventId: first.messages.at(-1)!.id, query });
    await making;
    const expected = await eventIdsOf([agentId]);
    await bothHold(first, resumed, expected.length);
    const got = [...ids(first.messages), ...ids(resumed.messages)];
    expect(repeated(got)).toEqual([]);
    expect(got).toEqual(expected);
    await resumed.close();
  }, 60_000);

  it("the sixth stream of a network is a 429, another network's is not, and one closed frees its slot", async () => {
    // The streams of the tests before have ended (their slots are free).
    await waitFor(
      async () =>
        !(await (await fetch(`${service.metricsUrl}/metrics`)).text()).includes('partner_events_feed_streams_open{partner="feed-partner"}'),
      {
        timeoutMs: 5_000,
        intervalMs: 50,
        failure: 'streams of earlier tests still open',
      },
    );
    const open = [];
    for (let i = 0; i < 5; i += 1) open.push(await stream(service.baseUrl));
    expect(open.map((s) => s.response.status)).toEqual([200, 200, 200, 200, 200]);
    const sixth = await fetch(`${service.baseUrl}/partner/events`, { headers: { 'x-api-key': key, accept: 'text/event-stream' } });
    expect(sixth.status).toBe(429);
    expect(sixth.headers.get('retry-after')).toBeTruthy();
    expect(((await sixth.json()) as { type: string }).type).toBe('urn:partner-agent-status:problem:too-many-streams');
    // Pages are not streams.
    expect((await fetch(`${service.baseUrl}/partner/events?limit=1`, { headers: { 'x-api-key': key } })).status).toBe(200);
    const other = await stream(service.baseUrl, {}, otherKey);
    expect(other.response.status).toBe(200);
    // A second replica counts the same streams (the slots are in Redis).
    const second = await replica();
    const onSecond = await notShed(() =>
      fetch(`${second.baseUrl}/partner/events`, { headers: { 'x-api-key': key, accept: 'text/event-stream' } }),
    );
    expect(onSecond.status).toBe(429);
    await onSecond.arrayBuffer();
    // The probes answer while streams are open.
    expect((await fetch(`${service.baseUrl}/readyz`)).status).toBe(200);
    await open[0]!.close();
    const again = await waitFor(
      async () => {
        const next = await stream(service.baseUrl);
        if (next.response.status === 200) return next;
        await next.close();
        return undefined;
      },
      { timeoutMs: 5_000, intervalMs: 100, failure: 'the closed stream never freed its slot' },
    );
    expect(again.response.status).toBe(200);
    await Promise.all([...open.slice(1), other, again].map((s) => s.close()));
    await second.stop();
  }, 60_000);

  it('behind a transaction pooler (no LISTEN: one poll per replica) a stream still gets each change', async () => {
    const pooled = await startServiceProcess({ ...environment.env, DATABASE_POOLER: 'transaction' });
    replicas.push(pooled);
    const agentId = await db.agent(networkId);
    const live = await stream(pooled.baseUrl, { after: (await readAllPages(pooled.baseUrl, key)).cursor, query: `agentId=${agentId}` });
    for (let i = 0; i < 10; i += 1) await change(service.baseUrl, agentId, i % 2 === 1);
    const expected = await eventIdsOf([agentId]);
    await waitFor(() => live.messages.length >= expected.length, {
      timeoutMs: 10_000,
      intervalMs: 50,
      failure: 'the polling replica streamed too few',
    });
    expect(ids(live.messages)).toEqual(expected);
    const exposition = await (await fetch(`${pooled.metricsUrl}/metrics`)).text();
    expect(exposition).toMatch(/^partner_events_feed_listening 0$/m);
    await live.close();
    await pooled.stop();
  }, 60_000);

  it('a draining replica ends its streams; the client resumes on another replica with Last-Event-ID without a gap', async () => {
    const draining = await replica();
    const other = await replica();
    const agentId = await db.agent(networkId);
    const query = `agentId=${agentId}`;
    const first = await stream(draining.baseUrl, { after: (await readAllPages(other.baseUrl, key)).cursor, query });
    const making = (async () => {
      for (let i = 0; i < 120; i += 1) {
        if (i === 60) void draining.stop();
        await change(other.baseUrl, agentId, i % 2 === 1);
      }
    })();
    await first.done;
    expect(first.messages.length).toBeGreaterThan(0);
    const resumed = await stream(other.baseUrl, { lastEventId: first.messages.at(-1)!.id, query });
    await making;
    const expected = await eventIdsOf([agentId]);
    await bothHold(first, resumed, expected.length);
    expect([...ids(first.messages), ...ids(resumed.messages)]).toEqual(expected);
    expect(await draining.exited).toBe(0);
    await resumed.close();
  }, 90_000);
});

describe('reads that are refused', () => {
  it('filters by agent and type; a malformed cursor is a 400; a cursor past the retention is a 410', async () => {
    const agentId = await db.agent(networkId);
    const start = await readAllPages(service.baseUrl, key);
    await change(service.baseUrl, agentId, false);
    await change(service.baseUrl, agentId, true);
    const read = await waitFor(
      async () => {
        const pages = await readAllPages(service.baseUrl, key, { after: start.cursor, query: `agentId=${agentId}&types=agent.enabled` });
        return pages.events.length > 0 ? pages : undefined;
      },
      { timeoutMs: 5_000, intervalMs: 100, failure: 'no enable in the feed' },
    );
    expect(read.events.map((event) => [event.type, event.data.agentId])).toEqual([['partner-agent-status.agent.enabled', agentId]]);

    for (const bad of ['nonsense', 'MTox', Buffer.from('1:01:2').toString('base64url')]) {
      const response = await fetch(`${service.baseUrl}/partner/events?after=${bad}`, { headers: { 'x-api-key': key } });
      expect(response.status, bad).toBe(400);
      expect(response.headers.get('content-type')).toMatch(/problem\+json/);
    }
    const badType = await fetch(`${service.baseUrl}/partner/events?types=agent.exploded`, { headers: { 'x-api-key': key } });
    expect(badType.status).toBe(400);

    // The batches of the first reads are made older than the retention (30 days), as if time had passed.
    const first = await fetch(`${service.baseUrl}/partner/events?limit=1`, { headers: { 'x-api-key': key } });
    const { nextCursor } = (await first.json()) as { nextCursor: string };
    const [, batch] = Buffer.from(nextCursor, 'base64url').toString().split(':');
    await db.pool.query(`UPDATE event_batches SET created_at = now() - interval '31 days' WHERE id <= $1`, [batch]);
    const gone = await fetch(`${service.baseUrl}/partner/events?after=${nextCursor}`, { headers: { 'x-api-key': key } });
    expect(gone.status).toBe(410);
    expect(((await gone.json()) as { type: string }).type).toBe('urn:partner-agent-status:problem:events-gone');
    const goneStream = await fetch(`${service.baseUrl}/partner/events`, {
      headers: { 'x-api-key': key, accept: 'text/event-stream', 'last-event-id': nextCursor },
    });
    expect(goneStream.status).toBe(410);
    await goneStream.arrayBuffer();
    // Without a cursor the feed starts at the oldest event still kept.
    const fromOldest = await fetch(`${service.baseUrl}/partner/events?limit=500`, { headers: { 'x-api-key': key } });
    expect(fromOldest.status).toBe(200);
  }, 60_000);
});
