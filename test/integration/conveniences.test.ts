import { createHash, randomUUID } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createIdempotencyKeys, idempotencyKeyDigest } from '../../src/stores/idempotency-keys.js';
import { createDatabasePool } from '../../src/stores/postgres.js';
import { newApiKey, testDatabase } from '../support/data.js';
import { databaseUrl } from '../support/database-url.js';
import { injectStatusBody, urls } from '../support/partner.js';
import { startTestService, type TestService } from '../support/service.js';

// docs/interfaces.md §11 against the real PostgreSQL and Redis: Prefer: respond-async and wait,
// Idempotency-Key, ETag and If-Match, and the status history. The crash of a replica between
// recording a key and answering is conveniences.process.test.ts (the built service, killed).

const db = testDatabase();
let svc: TestService;
let limitedSvc: TestService;
let networkA: string;
let networkB: string;
let networkLimited: string;
const keyA = newApiKey();
const keyB = newApiKey();
const keyLimited = newApiKey();

const partnersOf = () => [
  { key: keyA, networkId: networkA, name: 'conv-partner-a' },
  { key: keyB, networkId: networkB, name: 'conv-partner-b' },
];

beforeAll(async () => {
  networkA = await db.network();
  networkB = await db.network();
  networkLimited = await db.network();
  // Spend management may be slowed to 2.5 s a call here without timing out.
  svc = await startTestService({ partners: partnersOf(), env: { SPEND_MANAGEMENT_TIMEOUT_MS: '5000' } });
  limitedSvc = await startTestService({
    partners: [{ key: keyLimited, networkId: networkLimited, name: 'conv-limited' }],
    env: { RATE_LIMIT_MAX: '4', RATE_LIMIT_WINDOW_MS: '60000' },
  });
});

afterEach(() => {
  svc.simulator.simulator.refuse([]);
  svc.simulator.simulator.setMode('ok');
});

afterAll(async () => {
  const closed = await Promise.allSettled([svc?.close(), limitedSvc?.close()]);
  await db.close();
  for (const result of closed) if (result.status === 'rejected') throw result.reason;
});

function post(body: { agentId: string; enabled: boolean }, headers: Record<string, string | string[]> = {}, key = keyA, service = svc) {
  return injectStatusBody(service.app, key, body, headers);
}

function get(path: string, key = keyA, service = svc) {
  return service.app.inject({ method: 'GET', url: path, headers: { 'x-api-key': key } });
}

function problemType(response: LightMyRequestResponse): string {
  expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
  return String(response.json().type).replace('urn:partner-agent-status:problem:', '');
}

/** Headers and body of an answer with what differs between any two requests taken out. */
function shapeOf(response: LightMyRequestResponse) {
  const { 'x-request-id': id, date: _date, 'content-length': length, ...headers } = response.headers;
  return { status: response.statusCode, headers, length: Number(length) - String(id).length, body: response.body.replace(String(id), '') };
}

function counter(answer: string): Promise<number> {
  return svc.service.metrics.convenienceAnswers
    .get()
    .then(
      (metric) => metric.values.find((v) => v.labels.answer === answer && v.labels.route === 'POST /partner/agents/status')?.value ?? 0,
    );
}

describe('Prefer: respond-async on a disable', () => {
  it('answers 202 with Location, Preference-Applied and the status once recorded, and pausing goes on', async () => {
    const agentId = await db.agent(networkA);
    const ids = await db.campaigns(agentId, 250);
    const before = await counter('accepted');
    const response = await post({ agentId, enabled: false }, { prefer: 'respond-async' });
    expect(response.statusCode).toBe(202);
    expect(response.headers.location).toBe(urls.agentStatus(agentId));
    expect(response.headers['preference-applied']).toBe('respond-async');
    expect(response.json()).toEqual({
      agentId,
      networkId: networkA,
      enabled: false,
      activeUnpausedCampaignCount: expect.any(Number),
      disableInProgress: true,
    });
    // Recorded: the flag, the pending row (or already finished) and the change row are committed.
    expect(await db.agentApproved(agentId)).toBe(false);
    expect(await db.changeCount(agentId)).toBe(1);
    expect(await counter('accepted')).toBe(before + 1);

    const location = String(response.headers.location);
    await vi.waitFor(async () => expect((await get(location)).json()).toMatchObject({ disableInProgress: false }), {
      timeout: 20_000,
      interval: 100,
    });
    expect((await get(location)).json()).toMatchObject({ enabled: false, activeUnpausedCampaignCount: 0 });
    expect((await db.pausedIds(agentId)).size).toBe(ids.length);
  });

  it('answers 200 as before when nothing is left to pause, and enables ignore the preference', async () => {
    const agentId = await db.agent(networkA);
    const disabled = await post({ agentId, enabled: false }, { prefer: 'respond-async' });
    expect(disabled.statusCode).toBe(200);
    expect(disabled.headers['preference-applied']).toBeUndefined();
    expect(disabled.json()).toMatchObject({ enabled: false, pausedCampaignCount: 0 });

    const enabled = await post({ agentId, enabled: true }, { prefer: 'respond-async' });
    expect(enabled.statusCode).toBe(200);
    expect(enabled.headers['preference-applied']).toBeUndefined();
    expect(enabled.headers.location).toBeUndefined();
  });

  it('with wait=N answers as without the preference when ready within N seconds', async () => {
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 3);
    const response = await post({ agentId, enabled: false }, { prefer: 'respond-async, wait=10' });
    expect(response.statusCode).toBe(200);
    expect(response.headers['preference-applied']).toBeUndefined();
    expect(response.json()).toMatchObject({ pausedCampaignCount: 3 });
  });

  it('with wait=N answers 202 after about N seconds when the answer is not ready by then', async () => {
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 3);
    svc.simulator.simulator.setMode('slow', { delayMs: 2_500 });
    const started = Date.now();
    // BWS around "=", a name in capitals and a repeated wait (the first counts) change nothing.
    const response = await post({ agentId, enabled: false }, { prefer: 'Respond-Async; foo=1, wait = 1, wait=30' });
    const took = Date.now() - started;
    expect(response.statusCode).toBe(202);
    expect(response.headers['preference-applied']).toBe('respond-async');
    expect(took).toBeGreaterThanOrEqual(1_000);
    expect(took).toBeLessThan(2_500);
    svc.simulator.simulator.setMode('ok');
    await vi.waitFor(async () => expect(await db.pendingRow(agentId)).toBe(false), { timeout: 20_000, interval: 100 });
  });

  it('gives no 202 while a platform transaction holds the agent row: the flag first, then 202', async () => {
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 5);
    // The restriction trigger takes the agent row FOR SHARE: the disable's flag cannot be set.
    const platform = await db.holdAgentRow(agentId);
    try {
      let answered = false;
      const response = post({ agentId, enabled: false }, { prefer: 'respond-async' }).finally(() => {
        answered = true;
      });
      await vi.waitFor(async () => expect(await db.changeCount(agentId)).toBe(1), { timeout: 5_000, interval: 20 });
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(answered).toBe(false);
      expect(await db.agentApproved(agentId)).toBe(true);
      await platform.commit();
      const accepted = await response;
      expect(accepted.statusCode).toBe(202);
      expect(await db.agentApproved(agentId)).toBe(false);
      await vi.waitFor(async () => expect(await db.pendingRow(agentId)).toBe(false), { timeout: 20_000, interval: 100 });
    } finally {
      await platform.end();
    }
  });

  it('a wait that is not delta-seconds is ignored: plain respond-async', async () => {
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 150);
    const response = await post({ agentId, enabled: false }, { prefer: 'respond-async, wait=abc' });
    expect(response.statusCode).toBe(202);
  });
});

describe('Idempotency-Key on the POST', () => {
  it('replays the first final answer with Idempotent-Replayed and does nothing again', async () => {
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 4);
    const key = randomUUID();
    const first = await post({ agentId, enabled: false }, { 'idempotency-key': key });
    expect(first.statusCode).toBe(200);
    expect(first.json()).toMatchObject({ pausedCampaignCount: 4 });
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    const replays = await counter('replayed');

    const again = await post({ agentId, enabled: false }, { 'idempotency-key': key });
    expect(again.statusCode).toBe(200);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toBe(first.body);
    expect(again.headers['content-type']).toBe(first.headers['content-type']);
    expect(await db.changeCount(agentId)).toBe(1);
    expect(await counter('replayed')).toBe(replays + 1);
  });

  it('keeps a 202 with its Location, and a 404', async () => {
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 150);
    const key = randomUUID();
    const first = await post({ agentId, enabled: false }, { 'idempotency-key': key, prefer: 'respond-async' });
    expect(first.statusCode).toBe(202);
    // A repeat without the preference gets the kept 202 all the same.
    const again = await post({ agentId, enabled: false }, { 'idempotency-key': key });
    expect(again.statusCode).toBe(202);
    expect(again.headers.location).toBe(first.headers.location);
    expect(again.headers['preference-applied']).toBe('respond-async');
    expect(again.body).toBe(first.body);

    const nowhere = `us-east-1:${randomUUID()}`;
    const missing = await post({ agentId: nowhere, enabled: true }, { 'idempotency-key': key.slice(0, 30) });
    expect(missing.statusCode).toBe(404);
    const missingAgain = await post({ agentId: nowhere, enabled: true }, { 'idempotency-key': key.slice(0, 30) });
    expect(missingAgain.statusCode).toBe(404);
    expect(missingAgain.headers['idempotent-replayed']).toBe('true');
    expect(missingAgain.body).toBe(missing.body);
    await vi.waitFor(async () => expect(await db.pendingRow(agentId)).toBe(false), { timeout: 20_000, interval: 100 });
  });

  it('a replayed enable after a later disable leaves the agent disabled', async () => {
    const agentId = await db.agent(networkA, { approved: false });
    const key = randomUUID();
    expect((await post({ agentId, enabled: true }, { 'idempotency-key': key })).statusCode).toBe(200);
    expect((await post({ agentId, enabled: false })).statusCode).toBe(200);
    const replay = await post({ agentId, enabled: true }, { 'idempotency-key': key });
    expect(replay.statusCode).toBe(200);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(await db.agentApproved(agentId)).toBe(false);
    expect(await db.changeCount(agentId)).toBe(2);
  });

  it('answers 422 for the same key with another body, and changes nothing', async () => {
    const agentId = await db.agent(networkA);
    const key = randomUUID();
    expect((await post({ agentId, enabled: true }, { 'idempotency-key': key })).statusCode).toBe(200);
    const other = await post({ agentId, enabled: false }, { 'idempotency-key': key });
    expect(other.statusCode).toBe(422);
    expect(problemType(other)).toBe('idempotency-key-reused');
    const otherAgent = await post({ agentId: await db.agent(networkA), enabled: true }, { 'idempotency-key': key });
    expect(otherAgent.statusCode).toBe(422);
    expect(await db.agentApproved(agentId)).toBe(true);
    expect(await db.changeCount(agentId)).toBe(1);
  });

  it('two concurrent requests with one key: one runs, the other gets 409 with Retry-After', async () => {
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 3);
    svc.simulator.simulator.setMode('slow', { delayMs: 1_500 });
    const key = randomUUID();
    const first = post({ agentId, enabled: false }, { 'idempotency-key': key });
    await vi.waitFor(async () => expect(await db.changeCount(agentId)).toBe(1), { timeout: 5_000, interval: 20 });
    const second = await post({ agentId, enabled: false }, { 'idempotency-key': key });
    expect(second.statusCode).toBe(409);
    expect(problemType(second)).toBe('idempotency-key-in-use');
    expect(Number(second.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect((await first).statusCode).toBe(200);
    expect(await db.changeCount(agentId)).toBe(1);
    // Once the first has answered, a repeat gets its answer.
    const third = await post({ agentId, enabled: false }, { 'idempotency-key': key });
    expect(third.headers['idempotent-replayed']).toBe('true');
    expect(third.body).toBe((await first).body);
  });

  it('a key used by two networks is two keys', async () => {
    const mine = await db.agent(networkA);
    const theirs = await db.agent(networkB);
    const key = randomUUID();
    const a = await post({ agentId: mine, enabled: false }, { 'idempotency-key': key });
    const b = await post({ agentId: theirs, enabled: true }, { 'idempotency-key': key }, keyB);
    expect([a.statusCode, b.statusCode]).toEqual([200, 200]);
    expect(b.headers['idempotent-replayed']).toBeUndefined();
    expect(await db.changeCount(theirs)).toBe(1);
  });

  it('keeps the key after a 500 of a recorded disable: a repeat finishes it without recording it again', async () => {
    const agentId = await db.agent(networkA);
    const ids = await db.campaigns(agentId, 2);
    svc.simulator.simulator.refuse(ids.slice(0, 1));
    const key = randomUUID();
    const failed = await post({ agentId, enabled: false }, { 'idempotency-key': key });
    expect(failed.statusCode).toBe(500);
    svc.simulator.simulator.refuse([]);
    const repeated = await post({ agentId, enabled: false }, { 'idempotency-key': key });
    expect(repeated.statusCode).toBe(200);
    expect(repeated.headers['idempotent-replayed']).toBeUndefined();
    expect(repeated.json()).toMatchObject({ agentId, enabled: false });
    expect(await db.changeCount(agentId)).toBe(1);
    expect(await db.pausedIds(agentId)).toEqual(new Set(ids));
    const replayed = await post({ agentId, enabled: false }, { 'idempotency-key': key });
    expect(replayed.headers['idempotent-replayed']).toBe('true');
    expect(replayed.body).toBe(repeated.body);
  });

  it('a key whose disable was superseded after its 500 answers 409 on a repeat, without recording it again', async () => {
    const agentId = await db.agent(networkA);
    const ids = await db.campaigns(agentId, 2);
    svc.simulator.simulator.refuse(ids.slice(0, 1));
    const key = randomUUID();
    expect((await post({ agentId, enabled: false }, { 'idempotency-key': key })).statusCode).toBe(500);
    svc.simulator.simulator.refuse([]);
    expect((await post({ agentId, enabled: true })).statusCode).toBe(200);
    const repeated = await post({ agentId, enabled: false }, { 'idempotency-key': key });
    expect(repeated.statusCode).toBe(409);
    expect(problemType(repeated)).toBe('superseded');
    expect(await db.agentApproved(agentId)).toBe(true);
    expect(await db.changeCount(agentId)).toBe(2);
  });

  it('release forgets a key without a change and keeps one whose change committed, its claim ended', async () => {
    const pool = await createDatabasePool({ url: databaseUrl(), maxPoolSize: 1, statementTimeoutMs: 2_000 });
    try {
      const keys = createIdempotencyKeys(pool, svc.service.metrics, 50_000);
      const request = { agentId: await db.agent(networkA), enabled: true };
      const plain = { networkId: networkA, key: randomUUID(), claimToken: randomUUID() };
      expect(await keys.claim(plain.networkId, plain.key, request, plain.claimToken, 60_000)).toEqual({ kind: 'claimed', changeId: null });
      expect(await keys.release(plain)).toBe('forgotten');
      const other = { ...request, enabled: false };
      expect((await keys.claim(plain.networkId, plain.key, other, randomUUID(), 60_000)).kind).toBe('claimed');

      const changed = { networkId: networkA, key: randomUUID(), claimToken: randomUUID() };
      await keys.claim(changed.networkId, changed.key, request, changed.claimToken, 60_000);
      await db.pool.query('UPDATE idempotency_keys SET change_id = 42 WHERE idempotency_key = $1', [changed.key]);
      expect(await keys.release(changed)).toBe('kept');
      expect(await keys.claim(changed.networkId, changed.key, other, randomUUID(), 60_000)).toEqual({ kind: 'reused' });
      expect(await keys.claim(changed.networkId, changed.key, request, randomUUID(), 60_000)).toEqual({ kind: 'claimed', changeId: '42' });
    } finally {
      await pool.end();
    }
  });

  it('answers 400 for a malformed key (empty, too long, not ASCII, sent twice, an API key) and changes nothing', async () => {
    const agentId = await db.agent(networkA);
    // An API key anywhere in it too, whoever's: `Bearer <key>`, a key with a suffix.
    for (const key of ['', 'x'.repeat(256), 'clé', ['one', 'two'], keyB, `Bearer ${keyB}`, `${keyA}-retry-2`]) {
      const response = await post({ agentId, enabled: false }, { 'idempotency-key': key });
      expect(response.statusCode, String(key)).toBe(400);
      expect(problemType(response)).toBe('validation');
      expect(response.json().detail).toMatch(/Idempotency-Key/);
      expect(response.body).not.toContain(keyB);
    }
    expect((await post({ agentId, enabled: true }, { 'idempotency-key': 'x'.repeat(255) })).statusCode).toBe(200);
    expect(await db.changeCount(agentId)).toBe(1);
  });

  it('forgets a key after 24 hours: a repeat runs again', async () => {
    const agentId = await db.agent(networkA);
    const key = randomUUID();
    expect((await post({ agentId, enabled: true }, { 'idempotency-key': key })).statusCode).toBe(200);
    await db.pool.query("UPDATE idempotency_keys SET created_at = now() - interval '24 hours 1 second' WHERE idempotency_key = $1", [
      idempotencyKeyDigest(networkA, key),
    ]);
    const again = await post({ agentId, enabled: true }, { 'idempotency-key': key });
    expect(again.headers['idempotent-replayed']).toBeUndefined();
    expect(await db.changeCount(agentId)).toBe(2);
  });

  it('takes over the claim of a request that died after its change: answers without changing again', async () => {
    const agentId = await db.agent(networkA, { approved: false });
    const key = randomUUID();
    // As a replica killed after the enable's statement leaves it: running, change made, lease over.
    const first = await post({ agentId, enabled: true }, { 'idempotency-key': key });
    expect(first.statusCode).toBe(200);
    await db.pool.query(
      `UPDATE idempotency_keys SET state = 'running', status = NULL, body = NULL, headers = NULL,
         claim_token = gen_random_uuid(), lease_until = now() - interval '1 second' WHERE idempotency_key = $1`,
      [idempotencyKeyDigest(networkA, key)],
    );
    expect((await post({ agentId, enabled: false })).statusCode).toBe(200);
    const repeat = await post({ agentId, enabled: true }, { 'idempotency-key': key });
    expect(repeat.statusCode).toBe(200);
    expect(repeat.headers['idempotent-replayed']).toBeUndefined();
    expect(repeat.json()).toEqual(first.json());
    expect(await db.agentApproved(agentId)).toBe(false);
    expect(await db.changeCount(agentId)).toBe(2);
  });

  it('replays after a restart of the service', async () => {
    const agentId = await db.agent(networkA);
    const key = randomUUID();
    const first = await post({ agentId, enabled: false }, { 'idempotency-key': key });
    expect(first.statusCode).toBe(200);
    const restarted = await startTestService({ partners: partnersOf() });
    try {
      const again = await post({ agentId, enabled: false }, { 'idempotency-key': key }, keyA, restarted);
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.body).toBe(first.body);
    } finally {
      await restarted.close();
    }
  });

  it('deletes expired keys in small batches', async () => {
    const network = randomUUID();
    await db.pool.query(
      `INSERT INTO idempotency_keys (network_id, idempotency_key, agent_id, enabled, state, created_at)
       SELECT $1::uuid, 'old-' || i, 'us-east-1:x', true, 'done', now() - interval '25 hours' FROM generate_series(1, 1200) i`,
      [network],
    );
    await db.pool.query(
      `INSERT INTO idempotency_keys (network_id, idempotency_key, agent_id, enabled, state) VALUES ($1::uuid, 'fresh', 'us-east-1:x', true, 'done')`,
      [network],
    );
    const pool = await createDatabasePool({ url: databaseUrl(), maxPoolSize: 1, statementTimeoutMs: 2_000 });
    try {
      const keys = createIdempotencyKeys(pool, svc.service.metrics, 50_000);
      const batches: number[] = [];
      for (;;) {
        batches.push(await keys.purgeExpired(500));
        if (batches.at(-1) === 0) break;
      }
      expect(batches.slice(0, 3)).toEqual([500, 500, 200]);
    } finally {
      await pool.end();
    }
    const { rows } = await db.pool.query('SELECT idempotency_key FROM idempotency_keys WHERE network_id = $1', [network]);
    expect(rows).toEqual([{ idempotency_key: 'fresh' }]);
  });
});

describe('Idempotency-Keys: stored hashed, a quota per network', () => {
  it('stores a digest of network and key, never the value sent', async () => {
    const agentId = await db.agent(networkA);
    const key = `order-${randomUUID()}`;
    expect((await post({ agentId, enabled: true }, { 'idempotency-key': key })).statusCode).toBe(200);
    const { rows } = await db.pool.query('SELECT idempotency_key FROM idempotency_keys WHERE agent_id = $1', [agentId]);
    const digest = `sha256:${createHash('sha256').update(`${networkA}\n${key}`).digest('hex')}`;
    expect(rows).toEqual([{ idempotency_key: digest }]);
    const { rows: plain } = await db.pool.query(
      "SELECT 1 FROM idempotency_keys WHERE idempotency_key = $1 OR coalesce(body, '') LIKE '%' || $1 || '%'",
      [key],
    );
    expect(plain).toEqual([]);
    expect((await post({ agentId, enabled: true }, { 'idempotency-key': key })).headers['idempotent-replayed']).toBe('true');
  });

  it('past IDEMPOTENCY_KEYS_PER_NETWORK a new key answers 429 with Retry-After and changes nothing; kept keys, other networks and keyless requests go on', async () => {
    const network = await db.network();
    const other = await db.network();
    const [key, otherKey] = [newApiKey(), newApiKey()];
    const quotaSvc = await startTestService({
      partners: [
        { key, networkId: network, name: 'conv-quota' },
        { key: otherKey, networkId: other, name: 'conv-quota-other' },
      ],
      env: { IDEMPOTENCY_KEYS_PER_NETWORK: '3', RATE_LIMIT_MAX: '0' },
    });
    try {
      const send = (agentId: string, idempotencyKey: string | undefined, apiKey = key) =>
        post({ agentId, enabled: true }, idempotencyKey ? { 'idempotency-key': idempotencyKey } : {}, apiKey, quotaSvc);
      const agentId = await db.agent(network);
      const keys = [randomUUID(), randomUUID()];
      // A 404 is kept (docs/interfaces.md §11) and takes room: two keys fit after it.
      expect((await send(`us-east-1:${randomUUID()}`, randomUUID())).statusCode).toBe(404);
      for (const k of keys) expect((await send(agentId, k)).statusCode).toBe(200);
      expect(await db.changeCount(agentId)).toBe(2);

      const refused = await send(agentId, randomUUID());
      expect(refused.statusCode).toBe(429);
      expect(problemType(refused)).toBe('idempotency-key-quota');
      expect(refused.headers['retry-after']).toBe('60');
      expect(await db.changeCount(agentId)).toBe(2);
      // What the network holds still answers, and so does a request without a key; other networks have their own room.
      expect((await send(agentId, keys[0])).headers['idempotent-replayed']).toBe('true');
      expect((await send(agentId, undefined)).statusCode).toBe(200);
      expect((await send(await db.agent(other), randomUUID(), otherKey)).statusCode).toBe(200);

      // A key that expires and is purged makes room again.
      await db.pool.query(
        "UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE network_id = $1 AND agent_id = $2 AND status = 200 AND ctid = (SELECT min(ctid) FROM idempotency_keys WHERE network_id = $1 AND agent_id = $2)",
        [network, agentId],
      );
      const pool = await createDatabasePool({ url: databaseUrl(), maxPoolSize: 1, statementTimeoutMs: 2_000 });
      try {
        expect(await createIdempotencyKeys(pool, svc.service.metrics, 3).purgeExpired(100)).toBeGreaterThanOrEqual(1);
      } finally {
        await pool.end();
      }
      expect((await send(agentId, randomUUID())).statusCode).toBe(200);
      expect((await send(agentId, randomUUID())).statusCode).toBe(429);
    } finally {
      await quotaSvc.close();
    }
  });

  it('counts again exactly before refusing: keys removed behind its back do not hold a network at its quota', async () => {
    const network = await db.network();
    const key = newApiKey();
    const quotaSvc = await startTestService({
      partners: [{ key, networkId: network, name: 'conv-recount' }],
      env: { IDEMPOTENCY_KEYS_PER_NETWORK: '2', RATE_LIMIT_MAX: '0' },
    });
    try {
      const agentId = await db.agent(network);
      const send = () => post({ agentId, enabled: true }, { 'idempotency-key': randomUUID() }, key, quotaSvc);
      for (let i = 0; i < 2; i += 1) expect((await send()).statusCode).toBe(200);
      // An SRE deletes the network's keys by hand: the count says 2, the table holds none.
      await db.pool.query('DELETE FROM idempotency_keys WHERE network_id = $1', [network]);
      expect((await send()).statusCode).toBe(200);
    } finally {
      await quotaSvc.close();
    }
  });
});

describe('ETag on the status, If-Match on the POST', () => {
  it('names the latest change: "v0" before any, changes exactly when a change is recorded', async () => {
    const agentId = await db.agent(networkA);
    const path = urls.agentStatus(agentId);
    const fresh = await get(path);
    expect(fresh.headers.etag).toBe('"v0"');
    expect((await get(path)).headers.etag).toBe(fresh.headers.etag);
    await post({ agentId, enabled: true });
    const after = (await get(path)).headers.etag;
    expect(after).toBe('"v1"');
    expect(after).not.toBe(fresh.headers.etag);
    expect((await get(path)).headers.etag).toBe(after);
  });

  it("another network's changes move neither the ETag nor the history's changeIds and cursors", async () => {
    const mine = await db.agent(networkA);
    const theirs = await db.agent(networkB);
    const status = (agentId: string, key = keyA) => get(urls.agentStatus(agentId), key);
    const history = async (query = '') =>
      (await get(`${urls.statusChanges(mine)}${query}`)).json() as {
        changes: { changeId: number }[];
        nextBefore: number | null;
      };
    await post({ agentId: mine, enabled: false });
    const first = String((await status(mine)).headers.etag);
    // Network B makes 7 changes meanwhile.
    for (let i = 0; i < 7; i += 1) expect((await post({ agentId: theirs, enabled: i % 2 === 1 }, {}, keyB)).statusCode).toBe(200);
    expect((await status(mine)).headers.etag).toBe(first);
    await post({ agentId: mine, enabled: true });
    expect([first, (await status(mine)).headers.etag]).toEqual(['"v1"', '"v2"']);
    expect((await status(theirs, keyB)).headers.etag).toBe('"v7"');
    const page = await history('?limit=1');
    expect(page).toMatchObject({ changes: [{ changeId: 2 }], nextBefore: 2 });
    expect((await history(`?before=${page.nextBefore}`)).changes.map((c) => c.changeId)).toEqual([1]);
    expect((await post({ agentId: mine, enabled: false }, { 'if-match': '"v2"' })).statusCode).toBe(200);
  });

  it('If-Match current, a list holding it, or * makes the change; stale or weak answers 412 and records nothing', async () => {
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 2);
    const path = urls.agentStatus(agentId);
    const stale = String((await get(path)).headers.etag);
    await post({ agentId, enabled: true });
    const current = String((await get(path)).headers.etag);
    const before412 = await counter('precondition_failed');

    for (const ifMatch of [stale, `W/${current}`, current.replaceAll('"', ''), '"something"']) {
      const refused = await post({ agentId, enabled: false }, { 'if-match': ifMatch });
      expect(refused.statusCode, ifMatch).toBe(412);
      expect(problemType(refused)).toBe('precondition-failed');
    }
    expect(await counter('precondition_failed')).toBe(before412 + 4);
    expect(await db.changeCount(agentId)).toBe(1);
    expect(await db.agentApproved(agentId)).toBe(true);
    expect(await db.pendingRow(agentId)).toBe(false);

    const done = await post({ agentId, enabled: false }, { 'if-match': `"v7", ${current}` });
    expect(done.statusCode).toBe(200);
    expect(done.json()).toMatchObject({ pausedCampaignCount: 2 });
    expect((await post({ agentId, enabled: true }, { 'if-match': current })).statusCode).toBe(412);
    expect((await post({ agentId, enabled: true }, { 'if-match': '*' })).statusCode).toBe(200);
    expect(await db.changeCount(agentId)).toBe(3);
  });

  it('two concurrent changes with one tag: one is made, the other answers 412', async () => {
    const agentId = await db.agent(networkA);
    const tag = String((await get(urls.agentStatus(agentId))).headers.etag);
    const answers = await Promise.all([
      post({ agentId, enabled: false }, { 'if-match': tag }),
      post({ agentId, enabled: true }, { 'if-match': tag }),
      post({ agentId, enabled: false }, { 'if-match': tag }),
    ]);
    expect(answers.map((a) => a.statusCode).sort()).toEqual([200, 412, 412]);
    expect(await db.changeCount(agentId)).toBe(1);
  });

  it('a replay comes before If-Match: the repeat of a conditional change gets its answer, not 412', async () => {
    const agentId = await db.agent(networkA);
    const tag = String((await get(urls.agentStatus(agentId))).headers.etag);
    const key = randomUUID();
    const first = await post({ agentId, enabled: true }, { 'if-match': tag, 'idempotency-key': key });
    expect(first.statusCode).toBe(200);
    const again = await post({ agentId, enabled: true }, { 'if-match': tag, 'idempotency-key': key });
    expect(again.statusCode).toBe(200);
    expect(again.headers['idempotent-replayed']).toBe('true');
    // A 412 is not final: the key is forgotten.
    const refusedKey = randomUUID();
    expect((await post({ agentId, enabled: false }, { 'if-match': tag, 'idempotency-key': refusedKey })).statusCode).toBe(412);
    const { rows } = await db.pool.query('SELECT 1 FROM idempotency_keys WHERE idempotency_key = $1', [
      idempotencyKeyDigest(networkA, refusedKey),
    ]);
    expect(rows).toEqual([]);
  });
});

describe('If-Match waits for nothing of another network', () => {
  it("answers 404 at once for another network's agent whose changes are locked, as for an agent that exists nowhere", async () => {
    const theirs = await db.agent(networkB);
    const nowhere = `us-east-1:${randomUUID()}`;
    const holdMs = 3_000;
    // B's agent is being changed: a transaction holds its change lock (src/stores/postgres.ts).
    const holder = await db.pool.connect();
    await holder.query('BEGIN');
    await holder.query('SELECT pg_advisory_xact_lock(1885434739, hashtext($1))', [theirs]);
    const released = new Promise((resolve) => setTimeout(resolve, holdMs)).then(() => holder.query('ROLLBACK'));
    try {
      const timed = async (agentId: string, enabled: boolean) => {
        const started = performance.now();
        const response = await post({ agentId, enabled }, { 'if-match': '"v1"' });
        return { status: response.statusCode, ms: performance.now() - started };
      };
      const reference = await timed(nowhere, false);
      const disable = await timed(theirs, false);
      const enable = await timed(theirs, true);
      expect([reference.status, disable.status, enable.status]).toEqual([404, 404, 404]);
      // Generous: a wait for the lock would take the whole hold time.
      for (const answer of [disable, enable]) expect(answer.ms).toBeLessThan(Math.min(holdMs / 3, reference.ms * 10 + 300));
    } finally {
      await released;
      holder.release();
    }
    expect(await db.changeCount(theirs)).toBe(0);
  });
});

describe('GET /partner/agents/{agentId}/status-changes', () => {
  it('pages through more than 100 changes, newest first, nextBefore null on the last page', async () => {
    const agentId = await db.agent(networkA);
    const requestId = `history-${randomUUID()}`;
    const disable = await svc.setStatus(keyA, agentId, false, { 'x-request-id': requestId });
    expect(disable.statusCode).toBe(200);
    await db.pool.query(
      `INSERT INTO agent_status_changes (agent_id, network_id, enabled, partner_name, request_id)
       SELECT $1, $2::uuid, i % 2 = 0, 'seeded', NULL FROM generate_series(1, 129) i`,
      [agentId, networkA],
    );
    // The agent's own numbering: 130 down to 1, whatever other agents did meanwhile.
    const all = Array.from({ length: 130 }, (_, i) => 130 - i);

    const base = urls.statusChanges(agentId);
    const first = await get(`${base}?limit=100`);
    expect(first.statusCode).toBe(200);
    const page1 = first.json();
    expect(page1.agentId).toBe(agentId);
    expect(page1.changes.map((c: { changeId: number }) => c.changeId)).toEqual(all.slice(0, 100));
    expect(page1.nextBefore).toBe(all[99]);
    const page2 = (await get(`${base}?limit=100&before=${page1.nextBefore}`)).json();
    expect(page2.changes.map((c: { changeId: number }) => c.changeId)).toEqual(all.slice(100));
    expect(page2.nextBefore).toBeNull();
    expect(page2.changes.at(-1)).toEqual({
      changeId: all.at(-1),
      enabled: false,
      partnerName: 'conv-partner-a',
      requestId,
      changedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/),
    });

    const byDefault = (await get(base)).json();
    expect(byDefault.changes).toHaveLength(20);
    expect(byDefault.nextBefore).toBe(all[19]);
    // Exactly a page left: no next page.
    const exact = (await get(`${base}?limit=10&before=${all[119]}`)).json();
    expect(exact.changes).toHaveLength(10);
    expect(exact.nextBefore).toBeNull();
  });

  it('an agent with no change has an empty page; a bad limit or before is a 400', async () => {
    const agentId = await db.agent(networkA);
    const base = urls.statusChanges(agentId);
    expect((await get(base)).json()).toEqual({ agentId, changes: [], nextBefore: null });
    for (const query of ['limit=0', 'limit=101', 'limit=abc', 'before=0', 'before=-1', 'before=9223372036854775808', 'limit=1.5']) {
      const response = await get(`${base}?${query}`);
      expect(response.statusCode, query).toBe(400);
      expect(problemType(response)).toBe('validation');
    }
    expect((await get(`/partner/agents/us-east-1:not-a-uuid/status-changes`)).statusCode).toBe(400);
    expect((await get(base, newApiKey())).statusCode).toBe(401);
  });
});

describe('404s stay byte-identical with and without each new header', () => {
  it('POST: Idempotency-Key, If-Match and Prefer change nothing of the 404', async () => {
    const elsewhere = await db.agent(networkB);
    await db.campaigns(elsewhere, 1);
    const nowhere = `us-east-1:${randomUUID()}`;
    const plain = shapeOf(await post({ agentId: nowhere, enabled: false }));
    expect(plain.status).toBe(404);
    for (const headers of <Record<string, string>[]>[
      { 'idempotency-key': randomUUID() },
      { 'if-match': '"v1"' },
      { 'if-match': '*' },
      { prefer: 'respond-async' },
    ]) {
      for (const agentId of [elsewhere, nowhere]) {
        // A key of its own for each request: one key for two agents would be a 422.
        const sent = 'idempotency-key' in headers ? { 'idempotency-key': randomUUID() } : headers;
        expect(shapeOf(await post({ agentId, enabled: false }, sent)), JSON.stringify(sent)).toEqual(plain);
      }
    }
    expect(await db.changeCount(elsewhere)).toBe(0);
    expect(await db.agentApproved(elsewhere)).toBe(true);
  });

  it('GET status and status-changes: the same 404 for another network and for nowhere, no ETag', async () => {
    const elsewhere = await db.agent(networkB);
    await post({ agentId: elsewhere, enabled: false }, {}, keyB);
    const nowhere = `us-east-1:${randomUUID()}`;
    for (const suffix of ['status', 'status-changes', 'status-changes?limit=5']) {
      const [path, query] = suffix.split('?');
      const a = await get(`/partner/agents/${elsewhere}/${path}${query ? `?${query}` : ''}`);
      const b = await get(`/partner/agents/${nowhere}/${path}${query ? `?${query}` : ''}`);
      expect(a.statusCode).toBe(404);
      expect(a.headers.etag).toBeUndefined();
      expect(shapeOf(a)).toEqual(shapeOf(b));
      expect(a.body).not.toContain('conv-partner-b');
    }
  });
});

describe('the rate limit counts every one of them', () => {
  it('a replay, a history read and a 412 each count as a request', async () => {
    const agentId = await db.agent(networkLimited);
    const key = randomUUID();
    const answers = [
      await post({ agentId, enabled: true }, { 'idempotency-key': key }, keyLimited, limitedSvc),
      await post({ agentId, enabled: true }, { 'idempotency-key': key }, keyLimited, limitedSvc),
      await get(urls.statusChanges(agentId), keyLimited, limitedSvc),
      await post({ agentId, enabled: false }, { 'if-match': '"c0"' }, keyLimited, limitedSvc),
      await post({ agentId, enabled: true }, { 'idempotency-key': key }, keyLimited, limitedSvc),
    ];
    expect(answers.map((a) => a.statusCode)).toEqual([200, 200, 200, 412, 429]);
  });
});
