// The relay's leases across replicas of the built service (as `npm start` runs it), docs/events-order.md:
// a replica without EVENTS_NATS_URL beside one with it loses nothing (it never takes the `nats`
// role, so it never marks an event published); the holder SIGKILLed in the middle of a batch loses
// nothing, and another replica takes both roles over.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { databaseUrl } from '../support/database-url.js';
import { eventStreamProblems } from '../support/event-stream-check.js';
import { type NatsServer, startNatsServer } from '../support/nats-server.js';
import { startServiceProcess } from '../support/process.js';
import { processEnvironment } from '../support/process-environment.js';
import { waitFor } from '../support/wait.js';

const stream = 'PARTNER_AGENT_STATUS';
const db = testDatabase();
const key = newApiKey();
let nats: NatsServer;
let withBroker: Awaited<ReturnType<typeof processEnvironment>>;
let withoutBroker: Awaited<ReturnType<typeof processEnvironment>>;
let networkId: string;
const replicas: Array<Awaited<ReturnType<typeof startServiceProcess>>> = [];

beforeAll(async () => {
  nats = await startNatsServer();
  networkId = await db.network();
  const common = {
    OTEL_SDK_DISABLED: 'true',
    DRAIN_DELAY_MS: '0',
    RATE_LIMIT_MAX: '0',
    EVENTS_RELAY_POLL_INTERVAL_MS: '20',
    EVENTS_PUBLISH_TIMEOUT_MS: '1000',
    // A dead holder's roles pass on after 2 s.
    EVENTS_RELAY_LEASE_MS: '2000',
  };
  const partners = [{ key, networkId, name: 'relay-partner' }];
  withBroker = await processEnvironment(partners, { ...common, EVENTS_NATS_URL: nats.url, EVENTS_CREATE_STREAM: 'true' });
  withoutBroker = await processEnvironment(partners, common);
});

afterAll(async () => {
  await Promise.all(replicas.map((replica) => replica.stop()));
  await Promise.all([withBroker?.close(), withoutBroker?.close()]);
  await nats?.close();
  await db.close();
});

async function replica(env: Record<string, string>) {
  const started = await startServiceProcess(env);
  replicas.push(started);
  return started;
}

async function setStatus(baseUrl: string, agentId: string, enabled: boolean): Promise<void> {
  const response = await fetch(`${baseUrl}/partner/agents/status`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key },
    body: JSON.stringify({ agentId, enabled }),
  });
  expect(response.status).toBe(200);
}

async function holds(metricsUrl: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${metricsUrl}/metrics`)).text();
  const held: Record<string, number> = {};
  for (const [, role, value] of text.matchAll(/^events_relay_holder\{role="(\w+)"\} (\d+)/gm)) held[role!] = Number(value);
  return held;
}

/** Each agent disabled then enabled through the replicas in turn. */
async function changes(baseUrls: string[], agents: string[]): Promise<void> {
  for (const enabled of [false, true])
    for (const [at, agentId] of agents.entries()) await setStatus(baseUrls[at % baseUrls.length]!, agentId, enabled);
}

describe('a replica without EVENTS_NATS_URL beside one with it', () => {
  it('loses nothing: every event reaches the stream once, in order, whichever replica wrote or batched it', async () => {
    // The replica without a broker starts first and takes the batches; the other publishes them.
    const bare = await replica(withoutBroker.env);
    await waitFor(async () => (await holds(bare.metricsUrl)).batches === 1, {
      timeoutMs: 10_000,
      intervalMs: 50,
      failure: 'the first replica never took the batches',
    });
    const broker = await replica(withBroker.env);
    const agents = await Promise.all(Array.from({ length: 6 }, () => db.agent(networkId)));
    await changes([bare.baseUrl, broker.baseUrl], agents);
    expect(await eventStreamProblems(db.pool, nats, stream, agents, 30_000)).toEqual([]);
    expect(await holds(bare.metricsUrl)).toMatchObject({ batches: 1, nats: 0 });
    expect(await holds(broker.metricsUrl)).toMatchObject({ nats: 1 });
    await Promise.all(replicas.splice(0).map((r) => r.stop()));
  }, 90_000);
});

describe('the relay holder SIGKILLed in the middle of a batch', () => {
  it('loses nothing: its batch commits or not, and another replica takes both roles over', async () => {
    const first = await replica(withBroker.env);
    await waitFor(async () => (await holds(first.metricsUrl)).batches === 1 && (await holds(first.metricsUrl)).nats === 1, {
      timeoutMs: 10_000,
      intervalMs: 50,
      failure: 'the first replica never took both roles',
    });
    const agents = await Promise.all(Array.from({ length: 4 }, () => db.agent(networkId)));
    // The next batch's statement reads its events and then waits here, before it records the batch.
    const blocker = new pg.Client({ connectionString: databaseUrl() });
    await blocker.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query('LOCK TABLE event_batches IN EXCLUSIVE MODE');
      await changes([first.baseUrl], agents);
      await waitFor(
        async () => {
          const { rows } = await db.pool.query(
            "SELECT count(*)::int AS n FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'event_batches' AND NOT l.granted",
          );
          return rows[0].n > 0;
        },
        { timeoutMs: 10_000, intervalMs: 25, failure: 'the holder never reached its batch' },
      );
      first.child.kill('SIGKILL');
      await first.exited;
    } finally {
      await blocker.query('COMMIT');
      await blocker.end();
    }
    const second = await replica(withBroker.env);
    await changes([second.baseUrl], agents);
    expect(await eventStreamProblems(db.pool, nats, stream, agents, 30_000)).toEqual([]);
    expect(await holds(second.metricsUrl)).toMatchObject({ batches: 1, nats: 1 });
  }, 90_000);
});
