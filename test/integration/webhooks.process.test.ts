import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { startServiceProcess } from '../support/process.js';
import { processEnvironment } from '../support/process-environment.js';
import { waitFor } from '../support/wait.js';
import { type Receiver, startReceiver } from '../support/webhook-receiver.js';

// docs/interfaces.md §14 at the level of whole processes: a replica of the built service killed
// (SIGKILL) while its webhook attempts are under way loses none of its deliveries: another replica
// makes them once the dead one's leases run out, with the same webhook-id.
const db = testDatabase();
const key = newApiKey();
let networkId: string;
let environment: Awaited<ReturnType<typeof processEnvironment>>;
let receiver: Receiver;
type ServiceProcess = Awaited<ReturnType<typeof startServiceProcess>>;
const started: ServiceProcess[] = [];

beforeAll(async () => {
  networkId = await db.network();
  receiver = await startReceiver({ otherwise: 'hang' });
  environment = await processEnvironment([{ key, networkId, name: 'webhook-partner' }], {
    OTEL_SDK_DISABLED: 'true',
    DRAIN_DELAY_MS: '0',
    RATE_LIMIT_MAX: '0',
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
    WEBHOOK_RETRY_SCHEDULE: '0.2,0.2,0.2,0.2',
    WEBHOOK_POLL_INTERVAL_MS: '100',
    // An attempt lasts at most 3 s here, so a dead replica's leases run out a few seconds later.
    WEBHOOK_TIMEOUT_MS: '3000',
    DATABASE_STATEMENT_TIMEOUT_MS: '1000',
  });
});

afterAll(async () => {
  for (const replica of started) if (replica.child.exitCode === null) replica.child.kill('SIGKILL');
  await Promise.all(started.map((replica) => replica.exited));
  await receiver?.close();
  await environment?.close();
  await db.close();
});

async function replica(): Promise<ServiceProcess> {
  const made = await startServiceProcess(environment.env);
  started.push(made);
  return made;
}

describe('a replica killed mid-delivery loses no delivery', () => {
  it('another replica delivers everything the dead one had under way, with the same webhook-id', async () => {
    const first = await replica();
    const created = await fetch(`${first.baseUrl}/partner/webhook-endpoints`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': key },
      body: JSON.stringify({ url: receiver.url }),
    });
    expect(created.status).toBe(201);
    const endpoint = (await created.json()) as { id: string };

    // What the outbox relay's fan-out writes: one delivery per event for the endpoint.
    const events = Array.from({ length: 12 }, () => randomUUID());
    await db.pool.query(
      `INSERT INTO webhook_deliveries (endpoint_id, network_id, event_id, event_type, body)
       SELECT $1, $2, id, 'agent.disable.completed', json_build_object('id', id)::text FROM unnest($3::uuid[]) AS id`,
      [endpoint.id, networkId, events],
    );
    // The first replica's attempts reach the endpoint, which does not answer; then the replica dies.
    await waitFor(() => receiver.hanging >= 4, { timeoutMs: 10_000, intervalMs: 25, failure: 'no attempt under way' });
    const underWay = receiver.received.map((r) => r.headers['webhook-id'] as string);
    first.child.kill('SIGKILL');
    await first.exited;
    receiver.answerWith(200);

    await replica();
    const answered = () => new Set(receiver.received.filter((r) => r.answer === 200).map((r) => r.headers['webhook-id'] as string));
    await waitFor(() => events.every((id) => answered().has(id)), {
      timeoutMs: 30_000,
      intervalMs: 50,
      failure: () => `delivered ${answered().size} of ${events.length}`,
    });
    // The attempts cut off by the kill were made again with their webhook-id.
    for (const id of underWay) expect(answered().has(id)).toBe(true);
    await waitFor(
      async () => {
        const states = await db.pool.query(
          "SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = $1 AND state <> 'succeeded'",
          [endpoint.id],
        );
        return states.rows[0].n === 0;
      },
      { timeoutMs: 10_000, intervalMs: 50, failure: 'not every delivery recorded as succeeded' },
    );
  });
});
