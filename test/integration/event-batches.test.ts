import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { createPool, sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { createAgentRepository } from '../../src/stores/agent-repository.js';
import { newApiKey, testDatabase } from '../support/data.js';
import { databaseUrl } from '../support/database-url.js';
import { type NatsServer, type StreamedEvent, startNatsServer } from '../support/nats-server.js';
import { insertAgent, insertNetwork } from '../support/platform-rows.js';
import { startTestService, type TestService } from '../support/service.js';
import { waitFor } from '../support/wait.js';
import { startReceiver } from '../support/webhook-receiver.js';

// Events as snapshot batches of the history rows (docs/events-order.md): what the outbox relay could
// not do. A long transaction elsewhere holds nothing back; an agent's order holds when its later
// change has the smaller transaction id and lands in a later batch; webhooks go out while NATS is
// down; ids differ between two fresh databases; outbox rows from before the batches still go out.

const stream = 'PARTNER_AGENT_STATUS';
const db = testDatabase();
const key = newApiKey();
let nats: NatsServer;
let svc: TestService;
let networkId: string;

const eventsEnv = (natsUrl: string) => ({
  EVENTS_NATS_URL: natsUrl,
  EVENTS_CREATE_STREAM: 'true',
  EVENTS_RELAY_POLL_INTERVAL_MS: '20',
  EVENTS_RELAY_RETRY_DELAY_MS: '200',
  EVENTS_PUBLISH_TIMEOUT_MS: '1000',
  EVENTS_RELAY_LEASE_MS: '3000',
  // Small pages, so that a batch of a few dozen events is fanned out and published page by page.
  EVENTS_RELAY_BATCH_SIZE: '20',
  WEBHOOK_ALLOW_HTTP: 'true',
  WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
  WEBHOOK_POLL_INTERVAL_MS: '100',
  RATE_LIMIT_MAX: '0',
});

let freshIds: string[] = [];

beforeAll(async () => {
  // Before any pool of the service sets node-postgres's client-side limit for this process.
  freshIds = await firstEventIdsOfFreshDatabases();
  nats = await startNatsServer();
  networkId = await db.network();
  svc = await startTestService({ partners: [{ key, networkId, name: 'batches-partner' }], env: eventsEnv(nats.url) });
  // On a busy machine the start itself can delay the event loop past the shedding threshold: the
  // tests begin once a change is answered (a throwaway agent's).
  const warm = await db.agent(networkId);
  await waitFor(async () => (await svc.setStatus(key, warm, true)).statusCode === 200, {
    timeoutMs: 20_000,
    intervalMs: 250,
    failure: 'the service never answered a change',
  });
});

afterAll(async () => {
  const closed = await Promise.allSettled([svc?.close()]);
  await nats?.close();
  await db.close();
  for (const result of closed) if (result.status === 'rejected') throw result.reason;
});

/** The agents' events on the stream once there are `count`, in stream order. */
async function streamed(agentIds: string[], count: number, timeoutMs = 10_000): Promise<StreamedEvent[]> {
  const wanted = new Set(agentIds);
  let seen: StreamedEvent[] = [];
  return waitFor(
    async () => {
      seen = (await nats.messages(stream).catch(() => [])).filter((m) => wanted.has(m.event.data.agentId));
      return seen.length >= count ? seen : undefined;
    },
    { timeoutMs, intervalMs: 20, failure: () => `expected ${count} events on the stream, saw ${seen.length}` },
  );
}

/** A connection to another database of the same server (xids are the cluster's). */
async function otherDatabase(name = 'postgres'): Promise<pg.Client> {
  const url = new URL(inject('databaseAdminUrl'));
  url.pathname = `/${name}`;
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  return client;
}

/** The event id of the first change in each of two fresh databases, migrated as `npm run migrate` does. */
async function firstEventIdsOfFreshDatabases(): Promise<string[]> {
  const admin = await otherDatabase();
  const names = [0, 1].map(() => `pas_ids_${randomBytes(4).toString('hex')}`);
  try {
    const ids: string[] = [];
    for (const name of names) {
      await admin.query(`CREATE DATABASE ${name}`);
      const url = new URL(inject('databaseAdminUrl'));
      url.pathname = `/${name}`;
      await migrate(url.toString());
      const client = new pg.Pool({ connectionString: url.toString(), max: 1 });
      try {
        const network = await insertNetwork(client);
        const agent = await insertAgent(client, network);
        await client.query("INSERT INTO agent_status_changes (agent_id, network_id, enabled, partner_name) VALUES ($1, $2, true, 'ids')", [
          agent,
          network,
        ]);
        const { rows } = await client.query('SELECT position::int AS position, event_id::text AS id FROM agent_events');
        if (rows.length !== 1 || rows[0].position !== 1) throw new Error(`unexpected events: ${JSON.stringify(rows)}`);
        ids.push(rows[0].id);
      } finally {
        await client.end();
      }
    }
    return ids;
  } finally {
    for (const name of names) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  }
}

describe('a transaction held open in another database', () => {
  it('holds nothing back: each change made meanwhile is on the stream while it is still open', async () => {
    const holder = await otherDatabase();
    try {
      // The form that stalls a relay reading below pg_snapshot_xmin: an xid taken and kept open.
      await holder.query('BEGIN');
      const { rows } = await holder.query('SELECT pg_current_xact_id()::text AS xid');
      const agentId = await db.agent(networkId);
      // A relay reading below the horizon would publish none of these until the ROLLBACK below.
      for (const [at, enabled] of [false, true, false, true, false].entries()) {
        expect((await svc.setStatus(key, agentId, enabled)).statusCode).toBe(200);
        await streamed([agentId], at + 1, 5_000);
      }
      // Still open, still in every batch's in-progress list since.
      const { rows: open } = await db.pool.query(
        'SELECT count(*)::int AS n FROM event_batches WHERE $1::xid8 = ANY (ARRAY(SELECT pg_snapshot_xip(snapshot)))',
        [rows[0].xid],
      );
      expect(open[0].n).toBeGreaterThan(0);
      const { rows: still } = await holder.query('SELECT pg_current_xact_id()::text AS xid');
      expect(still[0].xid).toBe(rows[0].xid);
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      await holder.end();
    }
  });
});

describe("an agent's order across batches", () => {
  it('publishes the change that committed first first, though the later one took the smaller transaction id', async () => {
    const agentId = await db.agent(networkId);
    const pool = await createPool(databaseUrl(), { maxPoolSize: 1 });
    let proceed!: () => void;
    const proceeding = new Promise<void>((resolve) => {
      proceed = resolve;
    });
    let started!: () => void;
    const xidTaken = new Promise<void>((resolve) => {
      started = resolve;
    });
    // The later change: its transaction takes an xid first, then waits, then enables the agent.
    const later = pool.transaction(async (tx) => {
      await tx.query(sql.unsafe`SELECT pg_current_xact_id()`);
      started();
      await proceeding;
      const agents = createAgentRepository(
        tx as unknown as Parameters<typeof createAgentRepository>[0],
        createMetrics({ collectDefaults: false }),
      );
      return agents.enable(networkId, agentId, { partnerName: 'later', requestId: undefined });
    });
    try {
      await xidTaken;
      // The earlier change commits and is published (its batch taken) while the later one is open.
      expect((await svc.setStatus(key, agentId, false)).statusCode).toBe(200);
      await streamed([agentId], 1);
    } finally {
      proceed();
      await later;
      await pool.end();
    }
    const messages = await streamed([agentId], 3);
    const changes = messages.filter((m) => m.event.type !== 'partner-agent-status.agent.disable.completed');
    expect(changes.map((m) => m.event.data.changeId)).toEqual([1, 2]);
    const { rows } = await db.pool.query(
      `SELECT e.agent_seq::int AS seq, e.xid::text AS xid,
              (SELECT min(b.id) FROM event_batches b WHERE pg_visible_in_snapshot(e.xid, b.snapshot))::int AS batch
         FROM agent_events e WHERE e.agent_id = $1 AND e.type <> 'agent.disable.completed' ORDER BY e.position`,
      [agentId],
    );
    // In xid order the later change would come first; by (batch, position) it comes second.
    expect(BigInt(rows[1].xid)).toBeLessThan(BigInt(rows[0].xid));
    expect(rows.map((r) => r.seq)).toEqual([1, 2]);
    expect(rows[1].batch).toBeGreaterThan(rows[0].batch);
  });
});

describe('partner webhooks while NATS is down', () => {
  it('are delivered from the batches, and the stream gets the events once it is back', async () => {
    const receiver = await startReceiver();
    try {
      const endpoint = await svc.app.inject({
        method: 'POST',
        url: '/partner/webhook-endpoints',
        headers: { 'x-api-key': key, 'content-type': 'application/json' },
        payload: JSON.stringify({ url: receiver.url }),
      });
      expect(endpoint.statusCode, endpoint.body).toBe(201);
      const agentId = await db.agent(networkId);
      await nats.stop();
      try {
        expect((await svc.setStatus(key, agentId, true)).statusCode).toBe(200);
        const delivered = await waitFor(() => receiver.received.find((r) => JSON.parse(r.body).subject === agentId), {
          timeoutMs: 10_000,
          intervalMs: 50,
          failure: 'no webhook was delivered while NATS was down',
        });
        expect(JSON.parse(delivered.body).type).toBe('partner-agent-status.agent.enabled');
        expect(nats.pid).toBeUndefined();
      } finally {
        await nats.start();
      }
      const [event] = await streamed([agentId], 1, 30_000);
      expect(event!.event.id).toBe(receiver.received.map((r) => JSON.parse(r.body)).find((e) => e.subject === agentId).id);
    } finally {
      await svc.app.inject({ method: 'GET', url: '/partner/webhook-endpoints', headers: { 'x-api-key': key } }).then(async (list) => {
        for (const { id } of list.json().endpoints ?? [])
          await svc.app.inject({ method: 'DELETE', url: `/partner/webhook-endpoints/${id}`, headers: { 'x-api-key': key } });
      });
      await receiver.close();
    }
  }, 60_000);
});

describe('the NATS cursor moved from outside the relay', () => {
  it('is followed, never written over: the batches it skipped are not published (one page read before the move at most)', async () => {
    const skipped = await Promise.all(Array.from({ length: 3 }, () => db.agent(networkId)));
    await nats.stop();
    try {
      // One batch each while the broker is away: the relay's NATS step keeps failing on the first.
      for (const agentId of skipped) {
        expect((await svc.setStatus(key, agentId, true)).statusCode).toBe(200);
        await waitFor(async () => (await db.unbatchedEvents(agentId)) === 0, {
          timeoutMs: 10_000,
          intervalMs: 20,
          failure: 'never batched',
        });
      }
      // An operator skips the backlog.
      await db.pool.query("UPDATE event_consumers SET batch_id = (SELECT max(id) FROM event_batches), position = NULL WHERE name = 'nats'");
    } finally {
      await nats.start();
    }
    const later = await db.agent(networkId);
    expect((await svc.setStatus(key, later, true)).statusCode).toBe(200);
    await streamed([later], 1, 30_000);
    const published = (await nats.messages(stream)).filter((m) => skipped.includes(m.event.data.agentId));
    expect(published.length).toBeLessThanOrEqual(1);
  }, 60_000);
});

describe('a batch larger than a page', () => {
  it('gets every webhook delivery and every NATS publish, page by page', async () => {
    const receiver = await startReceiver();
    const network = await db.network();
    const agents = await Promise.all(Array.from({ length: 50 }, () => db.agent(network)));
    try {
      await db.pool.query('INSERT INTO webhook_endpoints (id, network_id, url, secret) VALUES (gen_random_uuid(), $1, $2, $3)', [
        network,
        receiver.url,
        `whsec_${Buffer.alloc(32, 7).toString('base64')}`,
      ]);
      // 50 changes in one transaction: one batch of 50 events, pages of 20.
      await db.pool.query(
        `INSERT INTO agent_status_changes (agent_id, network_id, enabled, partner_name)
         SELECT a, $2, true, 'big-batch' FROM unnest($1::text[]) a`,
        [agents, network],
      );
      await streamed(agents, 50, 20_000);
      await waitFor(
        async () => {
          const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM webhook_deliveries WHERE network_id = $1', [network]);
          return rows[0].n === 50;
        },
        { timeoutMs: 10_000, intervalMs: 50, failure: 'not every event of the batch got its webhook delivery' },
      );
      const { rows } = await db.pool.query(
        `SELECT count(DISTINCT b.id)::int AS batches FROM agent_events e, event_batches b
          WHERE e.agent_id = ANY ($1) AND pg_visible_in_snapshot(e.xid, b.snapshot)
            AND NOT EXISTS (SELECT 1 FROM event_batches p WHERE p.id < b.id AND pg_visible_in_snapshot(e.xid, p.snapshot))`,
        [agents],
      );
      expect(rows[0].batches).toBe(1);
    } finally {
      await db.pool.query('DELETE FROM webhook_endpoints WHERE network_id = $1', [network]);
      await receiver.close();
    }
  }, 60_000);
});

describe('event ids', () => {
  it('differ between two fresh databases for the same change', () => {
    // The same first change of each database: one id per database, never the same.
    expect(freshIds).toHaveLength(2);
    expect(freshIds[0]).not.toBe(freshIds[1]);
  });
});

describe('the outbox rows from before the batches', () => {
  it('are published, before the later events of the same agent', async () => {
    const agentId = await db.agent(networkId);
    // A change committed before migration 024, as the previous release wrote it: the history row
    // without an xid, and its outbox row (024's trigger is lifted for the test only).
    await db.pool.query('ALTER TABLE event_outbox DISABLE TRIGGER event_outbox_closed');
    try {
      await db.pool.query(
        `WITH change AS (
           INSERT INTO agent_status_changes (agent_id, network_id, enabled, partner_name, xid)
           VALUES ($1, $2, false, 'before', NULL) RETURNING change_id, agent_id, network_id, enabled, agent_seq, changed_at)
         INSERT INTO event_outbox (id, network_id, agent_id, type, event)
         SELECT md5('agent_status_changes/' || c.change_id)::uuid, c.network_id, c.agent_id, 'agent.disabled',
                jsonb_build_object('specversion', '1.0', 'id', md5('agent_status_changes/' || c.change_id)::uuid,
                  'source', 'urn:partner-agent-status', 'type', 'partner-agent-status.agent.disabled', 'subject', c.agent_id,
                  'time', to_char(c.changed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                  'datacontenttype', 'application/json',
                  'data', jsonb_build_object('agentId', c.agent_id, 'networkId', c.network_id, 'enabled', false, 'changeId', c.agent_seq))
         FROM change c`,
        [agentId, networkId],
      );
    } finally {
      await db.pool.query('ALTER TABLE event_outbox ENABLE TRIGGER event_outbox_closed');
    }
    // A replica started now (a relay that has not drained the outbox yet) takes over from the service.
    await svc.service.relay.stop();
    const next = await startTestService({ partners: [{ key, networkId, name: 'batches-partner' }], env: eventsEnv(nats.url) });
    try {
      expect((await next.setStatus(key, agentId, true)).statusCode).toBe(200);
      const messages = await streamed([agentId], 2);
      expect(messages.map((m) => [m.event.type, m.event.data.changeId])).toEqual([
        ['partner-agent-status.agent.disabled', 1],
        ['partner-agent-status.agent.enabled', 2],
      ]);
      expect(messages[0]!.msgId).toBe(messages[0]!.event.id);
      await waitFor(async () => (await db.pool.query('SELECT 1 FROM event_outbox WHERE relayed_at IS NULL')).rowCount === 0, {
        timeoutMs: 5_000,
        intervalMs: 25,
        failure: 'the outbox row was not marked relayed',
      });
    } finally {
      await next.close();
      svc.service.relay.start();
    }
  });
});
