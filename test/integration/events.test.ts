import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { createPool } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isCloudEvent } from '../../src/events/cloud-event.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { createAgentRepository } from '../../src/stores/agent-repository.js';
import { createEventBatchStore } from '../../src/stores/event-batches.js';
import { newApiKey, testDatabase, unpublishedEventsSql } from '../support/data.js';
import { databaseUrl } from '../support/database-url.js';
import { type NatsServer, type StreamedEvent, startNatsServer } from '../support/nats-server.js';
import { startTestService, type TestService } from '../support/service.js';
import { waitFor } from '../support/wait.js';

// Events (docs/interfaces.md §14): the outbox written with each change and each completed disable,
// relayed to a real nats-server with JetStream as CloudEvents, in order per agent, never skipped.

const stream = 'PARTNER_AGENT_STATUS';
const source = 'https://partner-api.test/';
const db = testDatabase();
const key = newApiKey();
let nats: NatsServer;
let svc: TestService;
let networkId: string;

beforeAll(async () => {
  nats = await startNatsServer();
  networkId = await db.network();
  svc = await startTestService({
    partners: [{ key, networkId, name: 'events-partner' }],
    env: {
      EVENTS_NATS_URL: nats.url,
      EVENTS_CREATE_STREAM: 'true',
      EVENTS_SOURCE: source,
      EVENTS_RELAY_POLL_INTERVAL_MS: '20',
      EVENTS_RELAY_RETRY_DELAY_MS: '200',
      EVENTS_PUBLISH_TIMEOUT_MS: '1000',
      EVENTS_RELAY_LEASE_MS: '5000',
    },
  });
});

afterAll(async () => {
  const closed = await Promise.allSettled([svc?.close()]);
  await nats?.close();
  await db.close();
  for (const result of closed) if (result.status === 'rejected') throw result.reason;
});

async function eventsOf(agentIds: string[], count: number, timeoutMs = 10_000): Promise<StreamedEvent[]> {
  const wanted = new Set(agentIds);
  let seen: StreamedEvent[] = [];
  return waitFor(
    async () => {
      seen = (await nats.messages(stream).catch(() => [])).filter((message) => wanted.has(message.event.data.agentId));
      return seen.length >= count ? seen : undefined;
    },
    {
      timeoutMs,
      intervalMs: 50,
      failure: () => `expected ${count} events, saw ${seen.length}: ${JSON.stringify(seen.map((m) => m.event.type))}`,
    },
  );
}

/** The agent's change rows: their event ids and per-agent numbers, in commit order. */
async function changeRows(agentId: string): Promise<Array<{ eventId: string; seq: number; enabled: boolean }>> {
  const { rows } = await db.pool.query(
    `SELECT event_id::text AS event_id, agent_seq::int AS seq, enabled
       FROM agent_events WHERE agent_id = $1 AND type <> 'agent.disable.completed' ORDER BY position`,
    [agentId],
  );
  return rows.map((row) => ({ eventId: row.event_id, seq: row.seq, enabled: row.enabled }));
}

describe('a disable, an enable and a completion each publish one CloudEvent', () => {
  it('publishes agent.disabled, agent.disable.completed and agent.enabled with the contract attributes, in that order', async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 3);
    expect((await svc.setStatus(key, agentId, false)).statusCode).toBe(200);
    expect((await svc.setStatus(key, agentId, true)).statusCode).toBe(200);

    const messages = await eventsOf([agentId], 3);
    expect(messages).toHaveLength(3);
    expect(messages.map((m) => m.event.type)).toEqual([
      'partner-agent-status.agent.disabled',
      'partner-agent-status.agent.disable.completed',
      'partner-agent-status.agent.enabled',
    ]);
    expect(messages.map((m) => m.subject)).toEqual([
      `partner-agent-status.${networkId}.agent.disabled`,
      `partner-agent-status.${networkId}.agent.disable.completed`,
      `partner-agent-status.${networkId}.agent.enabled`,
    ]);
    for (const message of messages) {
      expect(isCloudEvent(message.event)).toBe(true);
      expect(message.msgId).toBe(message.event.id);
      expect(message.event).toMatchObject({ specversion: '1.0', source, subject: agentId, datacontenttype: 'application/json' });
      expect(Math.abs(Date.parse(message.event.time) - Date.now())).toBeLessThan(60_000);
    }
    const [disabled, completed, enabled] = messages.map((m) => m.event);
    const rows = await changeRows(agentId);
    expect(disabled!.id).toBe(rows[0]!.eventId);
    expect(enabled!.id).toBe(rows[1]!.eventId);
    expect(disabled!.data).toEqual({ agentId, networkId, enabled: false, changeId: 1 });
    expect(completed!.data).toEqual({ agentId, networkId, enabled: false, changeId: 1, pausedCampaignCount: 3 });
    expect(enabled!.data).toEqual({ agentId, networkId, enabled: true, changeId: 2 });
    expect(new Set(messages.map((m) => m.event.id)).size).toBe(3);
  });

  it('publishes a completion with a count of 0 for a disable with nothing to pause, and none for a superseded disable', async () => {
    const idle = await db.agent(networkId);
    expect((await svc.setStatus(key, idle, false)).statusCode).toBe(200);
    const [, completion] = await eventsOf([idle], 2);
    expect(completion!.event.type).toBe('partner-agent-status.agent.disable.completed');
    expect(completion!.event.data).toEqual({ agentId: idle, networkId, enabled: false, changeId: 1, pausedCampaignCount: 0 });

    // A disable whose campaigns spend management refuses stays pending; the enable supersedes it.
    const refused = await db.agent(networkId);
    const campaigns = await db.campaigns(refused, 2);
    svc.sim.refuse(campaigns);
    try {
      expect((await svc.setStatus(key, refused, false)).statusCode).toBe(500);
      expect((await svc.setStatus(key, refused, true)).statusCode).toBe(200);
    } finally {
      svc.sim.refuse([]);
    }
    // A completion would come before the enable's event: there is none.
    expect((await eventsOf([refused], 2)).map((m) => m.event.type)).toEqual([
      'partner-agent-status.agent.disabled',
      'partner-agent-status.agent.enabled',
    ]);
  });

  it('writes no event for a change that is refused (404), and each event is marked published', async () => {
    const other = await db.network();
    const foreign = await db.agent(other);
    expect((await svc.setStatus(key, foreign, false)).statusCode).toBe(404);
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM agent_events WHERE agent_id = $1', [foreign]);
    expect(rows[0].n).toBe(0);

    const agentId = await db.agent(networkId);
    expect((await svc.setStatus(key, agentId, true)).statusCode).toBe(200);
    await eventsOf([agentId], 1);
    await waitFor(async () => (await db.unrelayedEvents(agentId)) === 0, {
      timeoutMs: 5_000,
      intervalMs: 25,
      failure: 'the published event was not marked relayed',
    });
  });
});

describe('the relay never skips an event committed late', () => {
  it('publishes both events when a transaction holding an earlier event commits after a later one', async () => {
    const early = await db.agent(networkId);
    const late = await db.agent(networkId);
    // The service's own enable statement, inside a transaction the test holds open.
    const pool = await createPool(databaseUrl(), { maxPoolSize: 1 });
    let commit!: () => void;
    const committed = new Promise<void>((resolve) => {
      commit = resolve;
    });
    let wrote!: () => void;
    const written = new Promise<void>((resolve) => {
      wrote = resolve;
    });
    const held = pool.transaction(async (tx) => {
      const agents = createAgentRepository(
        tx as unknown as Parameters<typeof createAgentRepository>[0],
        createMetrics(),
        undefined,
        source,
      );
      expect(await agents.enable(networkId, early, { partnerName: 'held', requestId: undefined })).toEqual({ supersededDisable: false });
      wrote();
      await committed;
    });
    try {
      await written;
      expect((await svc.setStatus(key, late, true)).statusCode).toBe(200);
      await eventsOf([late], 1);
      const { rows } = await db.pool.query('SELECT agent_id FROM agent_events WHERE agent_id = ANY($1) ORDER BY position', [[early, late]]);
      // Only the later event is visible while the earlier one's transaction is open.
      expect(rows.map((row) => row.agent_id)).toEqual([late]);
    } finally {
      commit();
      await held;
      await pool.end();
    }
    const messages = await eventsOf([early, late], 2);
    expect(messages.map((m) => m.event.data.agentId).sort()).toEqual([early, late].sort());
    const { rows } = await db.pool.query('SELECT agent_id FROM agent_events WHERE agent_id = ANY($1) ORDER BY position', [[early, late]]);
    // The earlier event holds the lower position: a cursor past the later one would have lost it.
    expect(rows.map((row) => row.agent_id)).toEqual([early, late]);
  });
});

describe('an enable that waited for the change lock', () => {
  it('supersedes a disable committed meanwhile: its pending row is deleted, and no completion follows the enable', async () => {
    const agentId = await db.agent(networkId);
    const holder = await db.pool.connect();
    try {
      await holder.query('SELECT pg_advisory_lock(1885434739, hashtext($1))', [agentId]);
      const enabling = svc.setStatus(key, agentId, true);
      await waitFor(
        async () => {
          const { rows } = await db.pool.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted");
          return rows[0].n > 0;
        },
        { timeoutMs: 5_000, intervalMs: 10, failure: 'the enable never waited for the change lock' },
      );
      // A disable's pending row, committed after the enable's statement began and before it has the lock.
      await holder.query(
        "INSERT INTO pending_disables (agent_id, requested_at, next_attempt_at) VALUES ($1, now(), now() + interval '1 hour')",
        [agentId],
      );
      await holder.query('SELECT pg_advisory_unlock(1885434739, hashtext($1))', [agentId]);
      expect((await enabling).statusCode).toBe(200);
    } finally {
      await holder.query('SELECT pg_advisory_unlock_all()');
      holder.release();
    }
    const { rows } = await db.pool.query('SELECT 1 FROM pending_disables WHERE agent_id = $1', [agentId]);
    expect(rows).toEqual([]);
  });
});

describe('a broker that is down', () => {
  it('fails and delays no change for 10 s, and every event arrives in per-agent order once it is back', async () => {
    const agents = await Promise.all(Array.from({ length: 4 }, () => db.agent(networkId)));
    await nats.stop();
    const durations: number[] = [];
    const statuses: number[] = [];
    const stopAt = performance.now() + 10_000;
    let enabled = false;
    while (performance.now() < stopAt) {
      for (const agentId of agents) {
        const started = performance.now();
        const response = await svc.setStatus(key, agentId, enabled);
        durations.push(performance.now() - started);
        statuses.push(response.statusCode);
      }
      enabled = !enabled;
      await sleep(250);
    }
    // Every change answered, none waited out a publish time-out (the relay's, 1 s here).
    expect(statuses.length).toBeGreaterThanOrEqual(8);
    expect(statuses.every((status) => status === 200)).toBe(true);
    expect(Math.max(...durations)).toBeLessThan(1_000);
    const { rows: waiting } = await db.pool.query(unpublishedEventsSql, [agents]);
    expect(waiting[0].n).toBeGreaterThan(0);

    await nats.start();
    const expected = (await Promise.all(agents.map(changeRows))).flat();
    const completions = await db.pool.query(
      "SELECT count(*)::int AS n FROM agent_events WHERE agent_id = ANY($1) AND type = 'agent.disable.completed'",
      [agents],
    );
    const messages = await eventsOf(agents, expected.length + completions.rows[0].n, 30_000);
    const ids = messages.map((m) => m.event.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const row of expected) expect(ids).toContain(row.eventId);
    for (const agentId of agents) {
      const own = messages.filter((m) => m.event.data.agentId === agentId);
      const changes = own.filter((m) => m.event.type !== 'partner-agent-status.agent.disable.completed');
      expect(changes.map((m) => m.event.data.changeId)).toEqual((await changeRows(agentId)).map((row) => row.seq));
      // Each completion right after its disable, before the agent's next change.
      own.forEach((m, at) => {
        if (m.event.type !== 'partner-agent-status.agent.disable.completed') return;
        expect(own[at - 1]!.event).toMatchObject({
          type: 'partner-agent-status.agent.disabled',
          data: { changeId: m.event.data.changeId },
        });
      });
    }
    const failures = (await svc.service.metrics.registry.getSingleMetric('events_publish_failures_total')!.get()).values;
    expect(failures.reduce((sum, value) => sum + value.value, 0)).toBeGreaterThan(0);
  }, 60_000);
});

describe('without a broker', () => {
  it('takes the events into batches all the same (the webhooks and the feed get them), and holds no NATS lease', async () => {
    // The service with a broker gives its leases back, so that this replica takes the batches.
    await svc.service.relay.stop();
    const bare = await startTestService({
      partners: [{ key, networkId, name: 'events-partner' }],
      env: { EVENTS_RELAY_POLL_INTERVAL_MS: '20' },
    });
    const reader = await createPool(databaseUrl(), { maxPoolSize: 1 });
    try {
      const agentId = await db.agent(networkId);
      expect((await bare.setStatus(key, agentId, true)).statusCode).toBe(200);
      await waitFor(async () => (await db.unbatchedEvents(agentId)) === 0, {
        timeoutMs: 5_000,
        intervalMs: 25,
        failure: 'the event was not taken into a batch without a broker',
      });
      const batches = createEventBatchStore(reader, createMetrics({ collectDefaults: false }));
      const { rows } = await db.pool.query(
        `SELECT b.id::text FROM event_batches b, agent_events e
          WHERE e.agent_id = $1 AND pg_visible_in_snapshot(e.xid, b.snapshot) ORDER BY b.id LIMIT 1`,
        [agentId],
      );
      const pair = await batches.batchAfter(String(BigInt(rows[0].id) - 1n));
      const events = await batches.read(pair!.previous, pair!.batch, null, 500, 'urn:partner-agent-status');
      const event = JSON.parse(events.find((e) => e.agentId === agentId)!.event);
      expect(isCloudEvent(event)).toBe(true);
      expect(event.source).toBe('urn:partner-agent-status');
      const holder = (await bare.service.metrics.registry.getSingleMetric('events_relay_holder')!.get()).values;
      expect(holder.find((v) => v.labels.role === 'batches')?.value).toBe(1);
      expect(holder.find((v) => v.labels.role === 'nats')?.value).toBe(0);
    } finally {
      await reader.end();
      await bare.close();
      svc.service.relay.start();
    }
  });
});

describe('the completion of a disable, as the statements that finish it record it', () => {
  it("returns the id agent_events gives the completion's event, and nothing for an agent without a disable", async () => {
    const completion = async (agentId: string) =>
      (await db.pool.query(`SELECT public.record_disable_completion($1, 3, $2, 'unused') AS id`, [agentId, source])).rows[0].id;
    const agentId = await db.agent(networkId);
    expect(await completion(agentId)).toBeNull();
    await db.pool.query(`INSERT INTO agent_status_changes (agent_id, network_id, enabled, partner_name) VALUES ($1, $2, false, 'events')`, [
      agentId,
      networkId,
    ]);
    const id = await completion(agentId);
    const { rows } = await db.pool.query(
      `SELECT event_id, paused_count FROM agent_events WHERE agent_id = $1 AND type = 'agent.disable.completed'`,
      [agentId],
    );
    expect(rows).toEqual([{ event_id: id, paused_count: 3 }]);
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  });
});
