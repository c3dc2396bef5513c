import { randomUUID } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { unreachableUrl } from '../../src/events/address-guard.js';
import type { DeliverableEvent } from '../../src/stores/webhook-deliveries.js';
import { newApiKey, testDatabase } from '../support/data.js';
import { urls } from '../support/partner.js';
import { startTestService, type TestService } from '../support/service.js';
import { patience, waitFor } from '../support/wait.js';
import { partnerCall, receiverSet, servedAfterStart } from '../support/webhook-receiver.js';

// docs/interfaces.md §14, partner webhooks, against the real service (in process), PostgreSQL and
// receivers on 127.0.0.1, which only the test settings let the sender reach.
const db = testDatabase();
let svc: TestService;
let networkA: string;
let networkB: string;
let networkC: string;
const keyA = newApiKey();
const keyB = newApiKey();
const keyC = newApiKey();
const receivers = receiverSet();
/** Gaps of the shortened schedule, in seconds. */
const scheduleSeconds = [0.3, 0.3, 0.3];

beforeAll(async () => {
  [networkA, networkB, networkC] = await Promise.all([db.network(), db.network(), db.network()]);
  svc = await startTestService({
    partners: [
      { key: keyA, networkId: networkA, name: 'partner-a' },
      { key: keyB, networkId: networkB, name: 'partner-b' },
      { key: keyC, networkId: networkC, name: 'partner-c' },
    ],
    env: {
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
      WEBHOOK_RETRY_SCHEDULE: scheduleSeconds.join(','),
      WEBHOOK_POLL_INTERVAL_MS: '100',
      RATE_LIMIT_MAX: '0',
    },
  });
  await servedAfterStart(svc.app, keyA);
});

afterEach(async () => {
  await receivers.closeAll();
});

afterAll(async () => {
  await svc?.close();
  await db.close();
});

const receiver = receivers.start;
const call = (method: string, url: string, key: string, payload?: unknown) => partnerCall(svc.app, method, url, key, payload);

async function register(key: string, url: string, eventTypes?: string[]) {
  const response = await call('POST', urls.webhookEndpoints, key, { url, ...(eventTypes ? { eventTypes } : {}) });
  expect(response.statusCode, response.body).toBe(201);
  return response.json() as { id: string; secret: string; url: string; status: string; eventTypes: string[] };
}

/** A CloudEvent of the outbox, as the relay hands it to the webhooks. */
function completionEvent(networkId: string, type = 'agent.disable.completed'): DeliverableEvent {
  const id = randomUUID();
  const agentId = `us-east-1:${randomUUID()}`;
  const body = JSON.stringify({
    specversion: '1.0',
    id,
    source: 'https://partner-agent-status.example',
    type: `com.example.partner-agent-status.${type}`,
    subject: agentId,
    time: new Date().toISOString(),
    datacontenttype: 'application/json',
    data: { agentId, networkId, enabled: false, changeId: randomUUID(), pausedCampaignCount: 3 },
  });
  return { id, networkId, type, body };
}

async function deliveries(key: string, endpointId: string) {
  const response = await call('GET', urls.webhookDeliveries(endpointId), key);
  expect(response.statusCode, response.body).toBe(200);
  return (
    response.json() as {
      deliveries: Array<{ id: string; eventId: string; state: string; attempts: Array<{ statusCode: number | null; outcome: string }> }>;
    }
  ).deliveries;
}

async function endpointOf(key: string, endpointId: string) {
  const response = await call('GET', urls.webhookEndpoints, key);
  return (response.json() as { endpoints: Array<{ id: string; status: string; disabledReason?: string }> }).endpoints.find(
    (endpoint) => endpoint.id === endpointId,
  );
}

const until = <T>(check: () => T | false | undefined | Promise<T | false | undefined>, what: string, timeoutMs = 10_000) =>
  waitFor(check, { timeoutMs, intervalMs: 25, failure: what });

async function clearEndpoints(key: string) {
  const response = await call('GET', urls.webhookEndpoints, key);
  for (const { id } of (response.json() as { endpoints: Array<{ id: string }> }).endpoints) {
    await call('DELETE', urls.webhookEndpoint(id), key);
  }
}

describe('a completion reaches the endpoint signed per Standard Webhooks', () => {
  it('verifies with the endpoint secret and with no other', async () => {
    await clearEndpoints(keyA);
    const hook = await receiver();
    const endpoint = await register(keyA, hook.url);
    expect(endpoint.secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/);
    expect(endpoint).toMatchObject({ status: 'enabled', eventTypes: ['agent.disabled', 'agent.enabled', 'agent.disable.completed'] });
    const event = completionEvent(networkA);
    expect(await svc.service.webhookDeliveries.enqueue([event])).toBe(1);
    const [got] = await until(() => hook.received.length === 1 && hook.received, 'no delivery arrived');
    expect(got!.body).toBe(event.body);
    expect(got!.headers['webhook-id']).toBe(event.id);
    expect(got!.headers['content-type']).toBe('application/json');
    expect(Math.abs(Number(got!.headers['webhook-timestamp']) - Date.now() / 1000)).toBeLessThan(60);
    const headers = got!.headers as Record<string, string>;
    expect(new Webhook(endpoint.secret).verify(got!.body, headers)).toEqual(JSON.parse(event.body));
    expect(() => new Webhook(`whsec_${Buffer.alloc(32, 7).toString('base64')}`).verify(got!.body, headers)).toThrow(/signature/);
    // The secret is shown once: never listed.
    const listed = await call('GET', urls.webhookEndpoints, keyA);
    expect(listed.body).not.toContain(endpoint.secret.slice(6));
    await until(async () => (await deliveries(keyA, endpoint.id))[0]?.state === 'succeeded', 'delivery not recorded as succeeded');
  });

  it('a disable that completes reaches the endpoint through the outbox, as its CloudEvent', async () => {
    await clearEndpoints(keyA);
    const hook = await receiver();
    const endpoint = await register(keyA, hook.url, ['agent.disable.completed']);
    const agentId = await db.agent(networkA);
    await db.campaigns(agentId, 2);
    const disabled = await svc.setStatus(keyA, agentId, false);
    expect(disabled.statusCode, disabled.body).toBe(200);
    const [got] = await until(() => hook.received.length > 0 && hook.received, 'the completion did not arrive');
    const event = new Webhook(endpoint.secret).verify(got!.body, got!.headers as Record<string, string>) as Record<string, unknown>;
    expect(event).toMatchObject({
      specversion: '1.0',
      id: got!.headers['webhook-id'],
      type: expect.stringMatching(/\.agent\.disable\.completed$/),
      subject: agentId,
      data: { agentId, networkId: networkA, enabled: false, pausedCampaignCount: 2 },
    });
    // Only the subscribed type: the disable's own agent.disabled event was not sent here.
    expect(hook.received).toHaveLength(1);
  });

  it('delivers only the event types an endpoint subscribed to', async () => {
    await clearEndpoints(keyA);
    const hook = await receiver();
    await register(keyA, hook.url, ['agent.enabled']);
    expect(await svc.service.webhookDeliveries.enqueue([completionEvent(networkA)])).toBe(0);
    expect(await svc.service.webhookDeliveries.enqueue([completionEvent(networkA, 'agent.enabled')])).toBe(1);
    await until(() => hook.received.length === 1, 'the subscribed event did not arrive');
  });
});

describe('retries', () => {
  it('500, 500, 200: three attempts with the same webhook-id on the configured schedule', async () => {
    await clearEndpoints(keyA);
    const hook = await receiver({ answers: [500, 500, 200] });
    const endpoint = await register(keyA, hook.url);
    const event = completionEvent(networkA);
    await svc.service.webhookDeliveries.enqueue([event]);
    await until(async () => (await deliveries(keyA, endpoint.id))[0]?.state === 'succeeded', 'not delivered after two failures');
    expect(hook.received.map((r) => r.headers['webhook-id'])).toEqual([event.id, event.id, event.id]);
    expect(hook.received.every((r) => r.body === event.body)).toBe(true);
    // Each retry waited at least the schedule's gap less its jitter.
    for (let i = 1; i < 3; i += 1) {
      expect(hook.received[i]!.at - hook.received[i - 1]!.at).toBeGreaterThanOrEqual(scheduleSeconds[i - 1]! * 900 - 5);
    }
    const [delivery] = await deliveries(keyA, endpoint.id);
    expect(delivery!.attempts.map((a) => [a.statusCode, a.outcome])).toEqual([
      [500, 'http_error'],
      [500, 'http_error'],
      [200, 'success'],
    ]);
  });

  it('gives up after the last attempt of the schedule, and a retry sends it again with the same webhook-id', async () => {
    await clearEndpoints(keyA);
    const hook = await receiver({ otherwise: 503 });
    const endpoint = await register(keyA, hook.url);
    const event = completionEvent(networkA);
    await svc.service.webhookDeliveries.enqueue([event]);
    const [failed] = await until(async () => {
      const list = await deliveries(keyA, endpoint.id);
      return list[0]?.state === 'failed' && list;
    }, 'delivery did not fail');
    expect(failed!.attempts).toHaveLength(scheduleSeconds.length + 1);
    hook.answerWith(200);
    const retried = await call('POST', urls.webhookDeliveryRetry(endpoint.id, failed!.id), keyA);
    expect(retried.statusCode, retried.body).toBe(202);
    expect(retried.json()).toMatchObject({ id: failed!.id, state: 'pending' });
    await until(async () => (await deliveries(keyA, endpoint.id))[0]?.state === 'succeeded', 'retry not delivered');
    expect(new Set(hook.received.map((r) => r.headers['webhook-id']))).toEqual(new Set([event.id]));
  });

  it('honours Retry-After', async () => {
    await clearEndpoints(keyA);
    const hook = await receiver({ answers: [{ status: 429, headers: { 'retry-after': '2' } }, 200] });
    const endpoint = await register(keyA, hook.url);
    await svc.service.webhookDeliveries.enqueue([completionEvent(networkA)]);
    await until(async () => (await deliveries(keyA, endpoint.id))[0]?.state === 'succeeded', 'not delivered after Retry-After');
    expect(hook.received[1]!.at - hook.received[0]!.at).toBeGreaterThanOrEqual(1_900);
  });
});

describe('disabling', () => {
  it('a 410 disables the endpoint at once: nothing more is sent to it', async () => {
    await clearEndpoints(keyA);
    const hook = await receiver({ otherwise: 410 });
    const endpoint = await register(keyA, hook.url);
    await svc.service.webhookDeliveries.enqueue([completionEvent(networkA)]);
    await until(async () => (await endpointOf(keyA, endpoint.id))?.status === 'disabled', 'endpoint not disabled');
    expect(await endpointOf(keyA, endpoint.id)).toMatchObject({ status: 'disabled', disabledReason: 'gone' });
    expect(hook.received).toHaveLength(1);
    expect((await deliveries(keyA, endpoint.id))[0]).toMatchObject({ state: 'failed' });
    expect(await svc.service.webhookDeliveries.enqueue([completionEvent(networkA)])).toBe(0);
    expect((await svc.service.metrics.registry.getSingleMetricAsString('webhook_endpoints_disabled_total')).toString()).toMatch(
      /reason="gone"} [1-9]/,
    );
  });

  it('an endpoint whose attempts all failed for 5 days is disabled', async () => {
    await clearEndpoints(keyA);
    const hook = await receiver({ otherwise: 500 });
    const endpoint = await register(keyA, hook.url);
    await db.pool.query(`UPDATE webhook_endpoints SET failing_since = now() - interval '5 days 1 minute' WHERE id = $1`, [endpoint.id]);
    await svc.service.webhookDeliveries.enqueue([completionEvent(networkA)]);
    await until(async () => (await endpointOf(keyA, endpoint.id))?.status === 'disabled', 'endpoint not disabled');
    expect(await endpointOf(keyA, endpoint.id)).toMatchObject({ disabledReason: 'failing' });
  });

  it('two successes in a row stop the 5-day clock; a lone success does not', async () => {
    await clearEndpoints(keyA);
    const hook = await receiver({ otherwise: 200 });
    const endpoint = await register(keyA, hook.url);
    await db.pool.query(`UPDATE webhook_endpoints SET failing_since = now() - interval '4 days' WHERE id = $1`, [endpoint.id]);
    const failingSince = async () =>
      (await db.pool.query('SELECT failing_since FROM webhook_endpoints WHERE id = $1', [endpoint.id])).rows[0]
        .failing_since as Date | null;
    await svc.service.webhookDeliveries.enqueue([completionEvent(networkA)]);
    await until(() => hook.received.length === 1, 'not delivered');
    await until(async () => (await deliveries(keyA, endpoint.id))[0]?.state === 'succeeded', 'not recorded');
    expect(await failingSince()).not.toBeNull();
    await svc.service.webhookDeliveries.enqueue([completionEvent(networkA)]);
    await until(async () => (await failingSince()) === null, 'the second success in a row did not stop the clock');
  });

  it('an endpoint failing for 5 days is disabled even with a lone success among its failures', async () => {
    await clearEndpoints(keyA);
    const hook = await receiver({ answers: [200], otherwise: 500 });
    const endpoint = await register(keyA, hook.url);
    await db.pool.query(`UPDATE webhook_endpoints SET failing_since = now() - interval '5 days 1 minute' WHERE id = $1`, [endpoint.id]);
    await svc.service.webhookDeliveries.enqueue([completionEvent(networkA)]);
    await until(async () => (await deliveries(keyA, endpoint.id))[0]?.state === 'succeeded', 'the lone success not recorded');
    expect(await endpointOf(keyA, endpoint.id)).toMatchObject({ status: 'enabled' });
    await svc.service.webhookDeliveries.enqueue([completionEvent(networkA)]);
    await until(async () => (await endpointOf(keyA, endpoint.id))?.status === 'disabled', 'endpoint not disabled');
    expect(await endpointOf(keyA, endpoint.id)).toMatchObject({ disabledReason: 'failing' });
  });

  it('a manual retry never enables a disabled endpoint; the enable call does, and its pending deliveries go out', async () => {
    await clearEndpoints(keyA);
    const hook = await receiver({ answers: [410], otherwise: 200 });
    const endpoint = await register(keyA, hook.url);
    await svc.service.webhookDeliveries.enqueue([completionEvent(networkA)]);
    await until(async () => (await endpointOf(keyA, endpoint.id))?.status === 'disabled', 'endpoint not disabled');
    const [failed] = await deliveries(keyA, endpoint.id);
    const retried = await call('POST', `/partner/webhook-endpoints/${endpoint.id}/deliveries/${failed!.id}/retry`, keyA);
    expect(retried.statusCode, retried.body).toBe(202);
    expect(await endpointOf(keyA, endpoint.id)).toMatchObject({ status: 'disabled', disabledReason: 'gone' });
    // Nothing is sent to a disabled endpoint, the retried delivery included.
    await svc.service.webhookSender.nudge();
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(hook.received).toHaveLength(1);

    const enabled = await call('POST', `/partner/webhook-endpoints/${endpoint.id}/enable`, keyA);
    expect(enabled.statusCode, enabled.body).toBe(200);
    expect(enabled.json()).toMatchObject({ id: endpoint.id, status: 'enabled' });
    expect(enabled.json()).not.toHaveProperty('disabledReason');
    await until(async () => (await deliveries(keyA, endpoint.id))[0]?.state === 'succeeded', 'the retried delivery did not go out');
    const other = await call('POST', `/partner/webhook-endpoints/${endpoint.id}/enable`, keyB);
    expect(other.statusCode).toBe(404);
  });
});

describe('secrets at rest', () => {
  it('stores signing secrets sealed, reads a secret stored in clear, and seals it', async () => {
    await clearEndpoints(keyA);
    const hook = await receiver();
    const endpoint = await register(keyA, hook.url);
    const stored = async () =>
      (await db.pool.query('SELECT secret FROM webhook_endpoints WHERE id = $1', [endpoint.id])).rows[0].secret as string;
    expect(await stored()).toMatch(/^v1:/);
    expect(await stored()).not.toContain(endpoint.secret.slice(6));
    // A row written before secrets were sealed.
    await db.pool.query('UPDATE webhook_endpoints SET secret = $2 WHERE id = $1', [endpoint.id, endpoint.secret]);
    const event = completionEvent(networkA);
    await svc.service.webhookDeliveries.enqueue([event]);
    const [got] = await until(() => hook.received.length === 1 && hook.received, 'no delivery arrived');
    expect(new Webhook(endpoint.secret).verify(got!.body, got!.headers as Record<string, string>)).toEqual(JSON.parse(event.body));
    expect(await svc.service.webhookEndpoints.sealStoredSecrets()).toBe(1);
    expect(await stored()).toMatch(/^v1:/);
  });

  it('forgets the previous secret once its overlap has ended', async () => {
    await clearEndpoints(keyA);
    const endpoint = await register(keyA, (await receiver()).url);
    await call('POST', `/partner/webhook-endpoints/${endpoint.id}/rotate-secret`, keyA);
    await db.pool.query(`UPDATE webhook_endpoints SET previous_secret_expires_at = now() - interval '1 second' WHERE id = $1`, [
      endpoint.id,
    ]);
    expect(await svc.service.webhookDeliveries.dropExpiredSecrets()).toBeGreaterThanOrEqual(1);
    const { rows } = await db.pool.query('SELECT previous_secret, previous_secret_expires_at FROM webhook_endpoints WHERE id = $1', [
      endpoint.id,
    ]);
    expect(rows[0]).toEqual({ previous_secret: null, previous_secret_expires_at: null });
  });
});

describe('history', () => {
  it('finished deliveries are kept 30 days, then pruned with their attempts; pending ones never', async () => {
    await clearEndpoints(keyA);
    const hook = await receiver({ answers: [200] });
    const endpoint = await register(keyA, hook.url);
    await svc.service.webhookDeliveries.enqueue([completionEvent(networkA)]);
    const [done] = await until(async () => {
      const list = await deliveries(keyA, endpoint.id);
      return list[0]?.state === 'succeeded' && list;
    }, 'not delivered');
    hook.answerWith('hang');
    const thirtyDays = 30 * 24 * 3600 * 1000;
    await db.pool.query(`UPDATE webhook_deliveries SET updated_at = now() - interval '29 days' WHERE id = $1`, [done!.id]);
    expect(await svc.service.webhookDeliveries.prune(thirtyDays, 100)).toBe(0);
    await db.pool.query(`UPDATE webhook_deliveries SET updated_at = now() - interval '31 days' WHERE id = $1`, [done!.id]);
    const pending = completionEvent(networkA);
    await db.pool.query(
      `INSERT INTO webhook_deliveries (endpoint_id, network_id, event_id, event_type, body, next_attempt_at, updated_at)
       VALUES ($1, $2, $3, 'agent.disabled', '{}', now() + interval '1 hour', now() - interval '40 days')`,
      [endpoint.id, networkA, pending.id],
    );
    expect(await svc.service.webhookDeliveries.prune(thirtyDays, 100)).toBe(1);
    expect((await deliveries(keyA, endpoint.id)).map((d) => d.eventId)).toEqual([pending.id]);
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM webhook_delivery_attempts WHERE delivery_id = $1', [done!.id]);
    expect(rows[0].n).toBe(0);
  });
});

describe('secret rotation', () => {
  it('during the overlap both the old and the new secret verify every delivery', async () => {
    await clearEndpoints(keyA);
    const hook = await receiver();
    const endpoint = await register(keyA, hook.url);
    const rotated = await call('POST', urls.webhookSecretRotation(endpoint.id), keyA);
    expect(rotated.statusCode, rotated.body).toBe(200);
    const { secret, previousSecretExpiresAt } = rotated.json() as { secret: string; previousSecretExpiresAt: string };
    expect(secret).not.toBe(endpoint.secret);
    expect(Date.parse(previousSecretExpiresAt) - Date.now()).toBeGreaterThan(23.9 * 3600 * 1000);
    const event = completionEvent(networkA);
    await svc.service.webhookDeliveries.enqueue([event]);
    const [got] = await until(() => hook.received.length === 1 && hook.received, 'no delivery arrived');
    const headers = got!.headers as Record<string, string>;
    expect(headers['webhook-signature']!.split(' ')).toHaveLength(2);
    expect(new Webhook(secret).verify(got!.body, headers)).toEqual(JSON.parse(event.body));
    expect(new Webhook(endpoint.secret).verify(got!.body, headers)).toEqual(JSON.parse(event.body));
  });

  it('after the overlap only the new secret signs', async () => {
    await clearEndpoints(keyA);
    const hook = await receiver();
    const endpoint = await register(keyA, hook.url);
    const { secret } = (await call('POST', urls.webhookSecretRotation(endpoint.id), keyA)).json() as { secret: string };
    await db.pool.query(`UPDATE webhook_endpoints SET previous_secret_expires_at = now() - interval '1 second' WHERE id = $1`, [
      endpoint.id,
    ]);
    await svc.service.webhookDeliveries.enqueue([completionEvent(networkA)]);
    const [got] = await until(() => hook.received.length === 1 && hook.received, 'no delivery arrived');
    const headers = got!.headers as Record<string, string>;
    expect(headers['webhook-signature']!.split(' ')).toHaveLength(1);
    expect(() => new Webhook(secret).verify(got!.body, headers)).not.toThrow();
    expect(() => new Webhook(endpoint.secret).verify(got!.body, headers)).toThrow();
  });
});

describe('networks are isolated', () => {
  it("another network's endpoint answers the same 404 as one that does not exist, on every route", async () => {
    await clearEndpoints(keyA);
    const hook = await receiver();
    const endpoint = await register(keyA, hook.url);
    await svc.service.webhookDeliveries.enqueue([completionEvent(networkA)]);
    const [delivery] = await until(async () => {
      const list = await deliveries(keyA, endpoint.id);
      return list.length === 1 && list;
    }, 'no delivery');
    const missing = randomUUID();
    const routes = (id: string): Array<[string, string]> => [
      ['DELETE', urls.webhookEndpoint(id)],
      ['POST', urls.webhookSecretRotation(id)],
      ['GET', urls.webhookDeliveries(id)],
      ['POST', urls.webhookDeliveryRetry(id, delivery!.id)],
    ];
    const strip = (body: string) => ({ ...JSON.parse(body), requestId: undefined });
    for (const [[method, url], [, missingUrl]] of routes(endpoint.id).map((route, i) => [route, routes(missing)[i]!] as const)) {
      const other = await call(method, url, keyB);
      const nowhere = await call(method, missingUrl, keyB);
      expect(other.statusCode, `${method} ${url}`).toBe(404);
      expect(strip(other.body)).toEqual(strip(nowhere.body));
      expect(other.headers['content-type']).toBe(nowhere.headers['content-type']);
    }
    const listB = await call('GET', urls.webhookEndpoints, keyB);
    expect(listB.json()).toEqual({ endpoints: [] });
    // Network A's endpoint is untouched, and B's events never reach it.
    expect(await endpointOf(keyA, endpoint.id)).toMatchObject({ status: 'enabled' });
    expect(await svc.service.webhookDeliveries.enqueue([completionEvent(networkB)])).toBe(0);
  });

  it('a network holds at most 10 endpoints', async () => {
    await clearEndpoints(keyC);
    const hook = await receiver();
    const made = await Promise.all(Array.from({ length: 12 }, () => call('POST', urls.webhookEndpoints, keyC, { url: hook.url })));
    expect(made.map((r) => r.statusCode).sort()).toEqual([...Array(10).fill(201), 409, 409]);
    expect(made.find((r) => r.statusCode === 409)!.json()).toMatchObject({
      type: 'urn:partner-agent-status:problem:webhook-endpoint-limit',
    });
    const [first] = made.filter((r) => r.statusCode === 201);
    expect((await call('DELETE', urls.webhookEndpoint(first!.json().id), keyC)).statusCode).toBe(204);
    expect((await call('POST', urls.webhookEndpoints, keyC, { url: hook.url })).statusCode).toBe(201);
    await clearEndpoints(keyC);
  });
});

describe('no request forgery', () => {
  it('refuses at registration a URL of an address the settings do not allow', async () => {
    for (const url of ['http://127.0.0.2:8080/hook', 'http://[::1]:8080/', 'http://169.254.169.254/', 'http://10.1.2.3/']) {
      const response = await call('POST', urls.webhookEndpoints, keyA, { url });
      expect(response.statusCode, url).toBe(400);
      expect(response.json().detail, url).toBe(unreachableUrl);
    }
  });

  it('refuses at delivery an endpoint whose address is not allowed, with no connection reaching it', async () => {
    await clearEndpoints(keyA);
    const target = await receiver({ host: '127.0.0.2' });
    // Registered through the front door with an allowed address, then pointed elsewhere (as a
    // name whose DNS answer changed would be).
    const endpoint = await register(keyA, (await receiver()).url);
    await db.pool.query('UPDATE webhook_endpoints SET url = $2 WHERE id = $1', [endpoint.id, target.url]);
    await svc.service.webhookDeliveries.enqueue([completionEvent(networkA)]);
    const [delivery] = await until(async () => {
      const list = await deliveries(keyA, endpoint.id);
      return (list[0]?.attempts.length ?? 0) > 0 && list;
    }, 'no attempt recorded');
    expect(delivery!.attempts[0]).toMatchObject({ outcome: 'refused', statusCode: null });
    expect(target.connections).toBe(0);
  });

  it('never follows a redirect: a 302 to another loopback address is a failed attempt, and nothing reaches that address', async () => {
    await clearEndpoints(keyA);
    const target = await receiver({ host: '127.0.0.2' });
    const hook = await receiver({ otherwise: { status: 302, headers: { location: target.url } } });
    const endpoint = await register(keyA, hook.url);
    await svc.service.webhookDeliveries.enqueue([completionEvent(networkA)]);
    const [delivery] = await until(async () => {
      const list = await deliveries(keyA, endpoint.id);
      return (list[0]?.attempts.length ?? 0) > 0 && list;
    }, 'no attempt recorded');
    expect(delivery!.attempts[0]).toMatchObject({ outcome: 'http_error', statusCode: 302 });
    expect(target.connections).toBe(0);
  });
});

describe('fairness', () => {
  it("network A's endpoint hanging does not delay network B's deliveries", async () => {
    await clearEndpoints(keyA);
    await clearEndpoints(keyB);
    const slow = await receiver({ otherwise: 'hang' });
    const fast = await receiver();
    await register(keyA, slow.url);
    await register(keyB, fast.url);
    // A has far more due than it may have under way; B's arrive after all of A's.
    await svc.service.webhookDeliveries.enqueue(Array.from({ length: 40 }, () => completionEvent(networkA)));
    await until(() => slow.hanging > 0, 'A was not attempted');
    await svc.service.webhookDeliveries.enqueue(Array.from({ length: 5 }, () => completionEvent(networkB)));
    await until(() => fast.received.length === 5, "B's deliveries did not arrive");
    // Every one of A's attempts was still hanging when B's had all arrived (the time-out is 15 s).
    expect(slow.hanging).toBe(slow.received.length);
    expect(slow.received.length).toBeLessThanOrEqual(4);
  });
});

describe('an attempt recorded while the endpoint is being deleted', () => {
  it("locks the endpoint before the delivery, as the endpoint's DELETE does (its cascade), so the two never deadlock", async () => {
    // A disabled endpoint (the sender claims nothing of it) with one delivery under this test's lease.
    const endpointId = randomUUID();
    const claimToken = randomUUID();
    await db.pool.query('INSERT INTO webhook_endpoints (id, network_id, url, secret, enabled) VALUES ($1, $2, $3, $4, false)', [
      endpointId,
      networkC,
      'https://example.invalid/hook',
      'sealed-elsewhere',
    ]);
    const { rows } = await db.pool.query(
      `INSERT INTO webhook_deliveries (endpoint_id, network_id, event_id, event_type, body, claim_token, lease_owner, next_attempt_at)
       VALUES ($1, $2, gen_random_uuid(), 'agent.disabled', '{}', $3, 'lock-order test', now() + interval '1 hour') RETURNING id`,
      [endpointId, networkC, claimToken],
    );
    const deliveryId = rows[0].id as string;
    // Another transaction holds the delivery's row: the attempt's record waits for it.
    const holder = await db.pool.connect();
    const prober = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE', [deliveryId]);
      const recorded = svc.service.webhookDeliveries.recordAttempt(
        { id: deliveryId, endpointId, claimToken } as Parameters<typeof svc.service.webhookDeliveries.recordAttempt>[0],
        {
          attemptedAt: new Date(),
          statusCode: 500,
          outcome: 'failure',
          durationMs: 5,
          retryInMs: 1_000,
          gone: false,
          disableAfterFailingMs: 86_400_000,
        },
      );
      // While it waits for the delivery, it already holds the endpoint: a DELETE of the endpoint (which
      // locks the endpoint, then its deliveries) waits behind it instead of taking the endpoint first.
      await waitFor(
        async () => {
          const held = await prober.query('SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR UPDATE NOWAIT', [endpointId]).then(
            () => false,
            (error: { code?: string }) => error.code === '55P03',
          );
          return held;
        },
        { timeoutMs: patience(5_000), intervalMs: 50, failure: 'the record waited for the delivery without holding its endpoint' },
      );
      await holder.query('COMMIT');
      expect((await recorded).recorded).toBe(true);
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      holder.release();
      prober.release();
      await db.pool.query('DELETE FROM webhook_endpoints WHERE id = $1', [endpointId]);
    }
  });
});
