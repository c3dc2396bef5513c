// At least once across SIGKILL (docs/interfaces.md §14): a replica of the built service (as `npm
// start` runs it) killed after the stream acknowledged an event and before its mark committed
// leaves the event to another replica, which publishes it again under the same id; the stream
// keeps one copy and nothing is lost.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { type NatsServer, startNatsServer } from '../support/nats-server.js';
import { startServiceProcess } from '../support/process.js';
import { processEnvironment } from '../support/process-environment.js';
import { waitFor } from '../support/wait.js';

const stream = 'PARTNER_AGENT_STATUS';
const db = testDatabase();
const key = newApiKey();
let nats: NatsServer;
let environment: Awaited<ReturnType<typeof processEnvironment>>;
let networkId: string;
const replicas: Array<Awaited<ReturnType<typeof startServiceProcess>>> = [];

beforeAll(async () => {
  nats = await startNatsServer();
  networkId = await db.network();
  environment = await processEnvironment([{ key, networkId, name: 'events-kill-partner' }], {
    OTEL_SDK_DISABLED: 'true',
    DRAIN_DELAY_MS: '0',
    RATE_LIMIT_MAX: '0',
    EVENTS_NATS_URL: nats.url,
    EVENTS_CREATE_STREAM: 'true',
    EVENTS_RELAY_POLL_INTERVAL_MS: '20',
    EVENTS_PUBLISH_TIMEOUT_MS: '1000',
    // A killed replica's claims pass on after 2 s, well inside the stream's 2-minute duplicate window.
    EVENTS_RELAY_LEASE_MS: '2000',
  });
});

afterAll(async () => {
  await Promise.all(replicas.map((replica) => replica.stop()));
  await environment?.close();
  await db.pool.query('DROP TRIGGER IF EXISTS refuse_event_marks ON event_consumers').catch(() => undefined);
  await nats?.close();
  await db.close();
});

async function replica() {
  const started = await startServiceProcess(environment.env);
  replicas.push(started);
  return started;
}

function setStatus(baseUrl: string, agentId: string, enabled: boolean) {
  return fetch(`${baseUrl}/partner/agents/status`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key },
    body: JSON.stringify({ agentId, enabled }),
  });
}

async function metric(metricsUrl: string, series: string): Promise<number> {
  const text = await (await fetch(`${metricsUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.split(' ')[1]) : 0;
}

describe('a replica SIGKILLed between the acknowledgement and the mark', () => {
  it('leaves the event to another replica, which publishes it again with the same id; the stream keeps one copy', async () => {
    // The mark (the NATS consumer's cursor moving past the event) cannot commit while this trigger
    // is there: the event is acknowledged, never marked.
    await db.pool.query(`
      CREATE OR REPLACE FUNCTION refuse_event_mark() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        -- Only the NATS consumer's mark: the batches (and the webhooks' cursor they move) go on.
        IF OLD.name = 'nats' THEN
          RAISE EXCEPTION 'mark refused by the test';
        END IF;
        RETURN NEW;
      END $$`);
    await db.pool.query(
      'CREATE OR REPLACE TRIGGER refuse_event_marks BEFORE UPDATE ON event_consumers FOR EACH ROW EXECUTE FUNCTION refuse_event_mark()',
    );
    const first = await replica();
    const agentId = await db.agent(networkId);
    expect((await setStatus(first.baseUrl, agentId, true)).status).toBe(200);
    const { rows } = await db.pool.query('SELECT event_id::text AS id FROM agent_events WHERE agent_id = $1', [agentId]);
    expect(rows).toHaveLength(1);
    const eventId: string = rows[0].id;

    // Acknowledged by the stream…
    await waitFor(async () => (await nats.messages(stream).catch(() => [])).some((m) => m.msgId === eventId), {
      timeoutMs: 10_000,
      intervalMs: 50,
      failure: 'the event never reached the stream',
    });
    // …and never marked; then the replica dies.
    expect(await db.unrelayedEvents(agentId)).toBe(1);
    first.child.kill('SIGKILL');
    await first.exited;
    await db.pool.query('DROP TRIGGER refuse_event_marks ON event_consumers');

    const second = await replica();
    // Another change of the same agent after the kill: it must come after the first one.
    expect((await setStatus(second.baseUrl, agentId, false)).status).toBe(200);
    await waitFor(async () => (await db.unrelayedEvents(agentId)) === 0, {
      timeoutMs: 15_000,
      intervalMs: 50,
      failure: 'the second replica did not relay the events left behind',
    });

    const messages = (await nats.messages(stream)).filter((m) => m.event.data.agentId === agentId);
    // One copy of the acknowledged event, then the later ones: disabled, its completion.
    expect(messages.map((m) => m.msgId)).toEqual(messages.map((m) => m.event.id));
    expect(messages.filter((m) => m.event.id === eventId)).toHaveLength(1);
    expect(messages.map((m) => m.event.type)).toEqual([
      'partner-agent-status.agent.enabled',
      'partner-agent-status.agent.disabled',
      'partner-agent-status.agent.disable.completed',
    ]);
    // The second replica did publish it again: the stream answered that it had the id already.
    expect(await metric(second.metricsUrl, 'events_published_total{duplicate="true"}')).toBeGreaterThanOrEqual(1);
  }, 60_000);
});
