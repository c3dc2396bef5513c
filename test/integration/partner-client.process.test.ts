import { randomBytes } from 'node:crypto';
import { inspect } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  createPartnerClient,
  type DeprecationWarning,
  type ListenedEvent,
  PartnerApiError,
  type PartnerClient,
  type PartnerClientOptions,
  PartnerNetworkError,
  verifyWebhook,
  WebhookVerificationError,
} from '../../clients/typescript/src/index.js';
import { newApiKey, testDatabase } from '../support/data.js';
import { freePort, startServiceProcess } from '../support/process.js';
import { processEnvironment } from '../support/process-environment.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { waitFor } from '../support/wait.js';
import { type Receiver, startReceiver } from '../support/webhook-receiver.js';

// The typed partner client (clients/typescript) against the built service as `npm start` runs it,
// with the machine's PostgreSQL and Redis and the spend-management simulator: every partner route,
// its retries (429 after Retry-After, a reset after a disable's commit repeated with the same
// Idempotency-Key), its typed errors (a 500's counts), the deprecation hook and webhook verification,
// bulk changes, the events feed's pages and its live listener cut mid-stream.
const db = testDatabase();
const key = newApiKey();
let networkId: string;
let environment: Awaited<ReturnType<typeof processEnvironment>>;
let service: Awaited<ReturnType<typeof startServiceProcess>>;
let limited: Awaited<ReturnType<typeof startServiceProcess>>;
let receiver: Receiver;
const deprecation = { deprecatedAt: '2026-01-01T00:00:00Z', sunsetAt: '2099-01-01T00:00:00Z', link: 'https://example.com/versions' };

/** Every attempt the client made: method, path, status (or the error), and the Idempotency-Key sent. */
interface Attempt {
  method: string;
  path: string;
  status: number | 'error';
  idempotencyKey: string | null;
  at: number;
}

function recordingFetch(attempts: Attempt[]): typeof fetch {
  return async (input, init) => {
    const url = new URL(String(input));
    const entry: Attempt = {
      method: init?.method ?? 'GET',
      path: url.pathname,
      status: 'error',
      idempotencyKey: new Headers(init?.headers).get('idempotency-key'),
      at: Date.now(),
    };
    attempts.push(entry);
    const response = await fetch(input, init);
    entry.status = response.status;
    return response;
  };
}

function client(options: Partial<PartnerClientOptions> & { attempts?: Attempt[] } = {}) {
  const { attempts, ...rest } = options;
  return createPartnerClient({
    baseUrl: service.baseUrl,
    apiKey: key,
    onWarning: () => undefined,
    ...(attempts ? { fetch: recordingFetch(attempts) } : {}),
    ...rest,
  });
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  return promise.then(
    () => {
      throw new Error('expected a rejection');
    },
    (error: Error) => error,
  );
}

beforeAll(async () => {
  networkId = await db.network();
  receiver = await startReceiver();
  environment = await processEnvironment([{ key, networkId, name: 'client-partner' }], {
    OTEL_SDK_DISABLED: 'true',
    DRAIN_DELAY_MS: '0',
    RATE_LIMIT_MAX: '0',
    API_VERSION_DEPRECATIONS: JSON.stringify({ '2026-11-21': deprecation }),
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
    WEBHOOK_RETRY_SCHEDULE: '0.2,0.2',
    WEBHOOK_POLL_INTERVAL_MS: '50',
    SPEND_MANAGEMENT_TIMEOUT_MS: '1000',
    WORKER_POLL_INTERVAL_MS: '200',
    // A comment on every idle stream each half second, so that the listener's idle timeout can be short.
    EVENTS_FEED_HEARTBEAT_MS: '500',
  });
  [service, limited] = await Promise.all([
    startServiceProcess(environment.env),
    // Three requests a network per two seconds: the fourth is a 429 with Retry-After.
    startServiceProcess({ ...environment.env, RATE_LIMIT_MAX: '3', RATE_LIMIT_WINDOW_MS: '2000' }),
  ]);
});

afterAll(async () => {
  await Promise.all([service?.stop(), limited?.stop()]);
  await receiver?.close();
  await environment?.close();
  await db.close();
});

describe('the agent routes through the client', () => {
  it('reads a status with its ETag, changes it with If-Match, refuses a stale tag with a typed 412, and pages the history', async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 3);
    const partner = client();

    const read = await partner.getAgentStatus(agentId);
    expect(read.data).toEqual({ agentId, networkId, enabled: true, activeUnpausedCampaignCount: 3, disableInProgress: false });
    expect(read.etag).toMatch(/^".+"$/);

    const disabled = await partner.setAgentStatus({ agentId, enabled: false }, { ifMatch: read.etag });
    expect(disabled).toMatchObject({ status: 200, replayed: false, data: { agentId, networkId, enabled: false, pausedCampaignCount: 3 } });

    const stale = await rejection(partner.setAgentStatus({ agentId, enabled: true }, { ifMatch: read.etag }));
    expect(stale).toBeInstanceOf(PartnerApiError);
    expect(stale).toMatchObject({ status: 412, type: expect.stringMatching(/precondition-failed$/), requestId: expect.any(String) });
    expect(await db.changeCount(agentId)).toBe(1);

    await partner.setAgentStatus({ agentId, enabled: true });
    await partner.setAgentStatus({ agentId, enabled: false });
    const pages = [];
    for await (const page of partner.statusChangePages(agentId, { limit: 2 })) pages.push(page.changes.map((change) => change.enabled));
    expect(pages).toEqual([[false, true], [false]]);
  });

  it('a disable answered 202 under respond-async, with its Location', async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 2);
    environment.simulator.simulator.setMode('slow', { delayMs: 500 });
    try {
      const answer = await client().setAgentStatus({ agentId, enabled: false }, { respondAsync: true });
      expect(answer.status).toBe(202);
      if (answer.status !== 202) throw new Error('narrowing');
      expect(answer.location).toBe(`/partner/agents/${agentId}/status`);
      expect(answer.data.disableInProgress).toBe(true);
    } finally {
      environment.simulator.simulator.setMode('ok');
    }
    await db.pendingDisableGone(agentId, 10_000);
  });

  it('an unknown agent is a typed 404 made once (no retry of a 4xx), and the OpenAPI document of a version is read', async () => {
    const attempts: Attempt[] = [];
    const partner = client({ attempts });
    const missing = await rejection(partner.getAgentStatus('us-east-1:00000000-0000-4000-8000-000000000000'));
    expect(missing).toMatchObject({ name: 'PartnerApiError', status: 404, type: 'urn:partner-agent-status:problem:not-found' });
    expect(attempts.map((a) => a.status)).toEqual([404]);

    const document = await partner.getOpenApiDocument('2026-11-21');
    expect(document.data).toMatchObject({ openapi: '3.1.0', info: { version: '2026-11-21' } });
  });
});

describe('retries', () => {
  it('a 429 is repeated after its Retry-After and then answered', { timeout: 30_000 }, async () => {
    const agentId = await db.agent(networkId);
    const attempts: Attempt[] = [];
    const partner = client({ baseUrl: limited.baseUrl, attempts, retry: { maxAttempts: 3, baseDelayMs: 50 } });
    // Reads until one met the limit (the fourth, unless a window ended among them); each is answered.
    const limitedSoFar = () => attempts.some((a) => a.status === 429);
    for (let i = 0; i < 10 && !limitedSoFar(); i += 1) expect((await partner.getAgentStatus(agentId)).status).toBe(200);
    const limitedAt = attempts.findIndex((a) => a.status === 429);
    expect(limitedAt, JSON.stringify(attempts)).toBeGreaterThanOrEqual(0);
    const after = attempts[limitedAt + 1]!;
    expect(after.status).toBe(200);
    // The service asked for at least a second (its window is 2 s); the client waited that long.
    expect(after.at - attempts[limitedAt]!.at).toBeGreaterThanOrEqual(900);
  });

  it('a connection reset after a disable committed: repeated with the same Idempotency-Key, answered as the first change, made once', async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 4);
    const port = Number(new URL(service.baseUrl).port);
    const proxy = await startTcpProxy({ host: '127.0.0.1', port }, { marker: agentId, count: 1, answers: 'reset' });
    try {
      const attempts: Attempt[] = [];
      const partner = client({ baseUrl: `http://127.0.0.1:${proxy.port}`, attempts, retry: { baseDelayMs: 20 } });
      const answer = await partner.setAgentStatus({ agentId, enabled: false });
      expect(proxy.held()).toBe(1);
      expect(attempts.map((a) => a.status)).toEqual(['error', 200]);
      expect(attempts[0]!.idempotencyKey).toMatch(/^[0-9a-f-]{36}$/);
      expect(attempts[1]!.idempotencyKey).toBe(attempts[0]!.idempotencyKey);
      expect(answer).toMatchObject({ status: 200, replayed: true, data: { agentId, enabled: false, pausedCampaignCount: 4 } });
      expect(await db.changeCount(agentId)).toBe(1);
    } finally {
      await proxy.close();
    }
  });

  it('no answer at all: a read is tried maxAttempts times, a create endpoint once, then a PartnerNetworkError', async () => {
    const closed = `http://127.0.0.1:${await freePort()}`;
    const attempts: Attempt[] = [];
    const partner = client({ baseUrl: closed, attempts, retry: { maxAttempts: 3, baseDelayMs: 10 } });
    const read = await rejection(partner.listWebhookEndpoints());
    expect(read).toBeInstanceOf(PartnerNetworkError);
    expect(read).toMatchObject({ attempts: 3 });
    const create = await rejection(partner.createWebhookEndpoint({ url: receiver.url }));
    expect(create).toMatchObject({ name: 'PartnerNetworkError', attempts: 1 });
    expect(attempts.map((a) => `${a.method} ${a.status}`)).toEqual(['GET error', 'GET error', 'GET error', 'POST error']);
  });
});

describe('errors and versions', () => {
  it("a 2026-11-21 disable that spend management fails is a PartnerApiError carrying the 500's counts", async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 3);
    const warnings: DeprecationWarning[] = [];
    const partner = client({ apiVersion: '2026-11-21', onWarning: (warning) => warnings.push(warning) });
    environment.simulator.simulator.setMode('fail', { failStatus: 503 });
    let failure: Error;
    try {
      failure = await rejection(partner.setAgentStatus({ agentId, enabled: false }));
    } finally {
      environment.simulator.simulator.setMode('ok');
    }
    expect(failure).toBeInstanceOf(PartnerApiError);
    const problem = failure as PartnerApiError;
    expect(problem.status).toBe(500);
    expect(problem.type).toMatch(/^urn:partner-agent-status:problem:/);
    expect(problem.requestId).toEqual(expect.any(String));
    expect(problem.pausedCampaignCount).toBe(0);
    expect(problem.remainingCampaignCount).toBe(3);
    // The deprecated version said so on the answer, through the hook.
    expect(warnings[0]).toMatchObject({
      kind: 'deprecation',
      apiVersion: '2026-11-21',
      sunsetAt: new Date(deprecation.sunsetAt),
      deprecatedAt: new Date(deprecation.deprecatedAt),
      link: deprecation.link,
    });
    await db.pendingDisableGone(agentId, 15_000);
  });

  it('the default warning hook warns once a client; the newest version gives no warning', async () => {
    const agentId = await db.agent(networkId);
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    try {
      const pinned = createPartnerClient({ baseUrl: service.baseUrl, apiKey: key, apiVersion: '2026-11-21' });
      await pinned.getAgentStatus(agentId);
      await pinned.getAgentStatus(agentId);
      expect(warn).toHaveBeenCalledTimes(1);
      expect(String(warn.mock.calls[0]?.[0])).toContain('2026-11-21 is deprecated');
      await createPartnerClient({ baseUrl: service.baseUrl, apiKey: key }).getAgentStatus(agentId);
      expect(warn).toHaveBeenCalledTimes(1);
    } finally {
      warn.mockRestore();
    }
  });

  it('no error, warning or stack the client makes holds the key', async () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    const errors: unknown[] = [];
    try {
      const partner = createPartnerClient({ baseUrl: service.baseUrl, apiKey: key, apiVersion: '2026-11-21' });
      errors.push(await rejection(partner.getAgentStatus('not-an-agent')));
      errors.push(await rejection(partner.setAgentStatus({ agentId: 'us-east-1:00000000-0000-4000-8000-000000000000', enabled: true })));
      const unreachable = createPartnerClient({ baseUrl: `http://127.0.0.1:${await freePort()}`, apiKey: key, retry: { maxAttempts: 1 } });
      errors.push(await rejection(unreachable.getAgentStatus('us-east-1:00000000-0000-4000-8000-000000000000')));
      errors.push(
        await rejection(verifyWebhook('{}', { 'webhook-id': 'x', 'webhook-timestamp': '1', 'webhook-signature': 'v1,AA==' }, key)),
      );
      const seen = [
        ...errors.flatMap((error) => [String(error), (error as Error).stack, JSON.stringify(error), inspect(error, { depth: 8 })]),
        inspect(partner, { depth: 8, showHidden: true }),
        ...warn.mock.calls.flat().map(String),
      ].join('\n');
      expect(errors.map((error) => (error as Error).name)).toEqual([
        'PartnerApiError',
        'PartnerApiError',
        'PartnerNetworkError',
        'WebhookVerificationError',
      ]);
      expect(seen).not.toContain(key);
      expect(service.output.join('\n')).not.toContain(key);
    } finally {
      warn.mockRestore();
    }
  });
});

describe('webhooks through the client', () => {
  it('endpoints created, listed, rotated and deleted; a delivery verified, retried and listed; a tampered one refused', {
    timeout: 30_000,
  }, async () => {
    const partner = client();
    const created = await partner.createWebhookEndpoint({ url: receiver.url });
    expect(created.status).toBe(201);
    const { id: endpointId, secret } = created.data;
    expect((await partner.listWebhookEndpoints()).data.endpoints.map((endpoint) => endpoint.id)).toContain(endpointId);

    const agentId = await db.agent(networkId);
    await partner.setAgentStatus({ agentId, enabled: false });
    const delivered = () => receiver.received.filter((call) => call.body.includes(agentId));
    await waitFor(() => delivered().length >= 1, { timeoutMs: 10_000, intervalMs: 25, failure: 'no webhook call for the disable' });
    const call = delivered()[0]!;

    const event = await verifyWebhook(call.body, call.headers, secret);
    expect(event).toMatchObject({ subject: agentId, data: { agentId, networkId } });
    const tampered = call.body.replaceAll(agentId, 'us-east-1:00000000-0000-4000-8000-000000000000');
    expect(tampered).not.toBe(call.body);
    expect(await rejection(verifyWebhook(tampered, call.headers, secret))).toBeInstanceOf(WebhookVerificationError);
    expect(await rejection(verifyWebhook(call.body, call.headers, `whsec_${randomBytes(32).toString('base64')}`))).toBeInstanceOf(
      WebhookVerificationError,
    );
    // Ten minutes later the same call is refused: it could be a replay.
    const later = () => Date.now() + 600_000;
    expect(await rejection(verifyWebhook(call.body, call.headers, secret, { now: later }))).toBeInstanceOf(WebhookVerificationError);

    // During a rotation both secrets sign; a verifier given both (or either) accepts the call.
    const rotated = await partner.rotateWebhookSecret(endpointId);
    const deliveries = await partner.listWebhookDeliveries(endpointId, { limit: 10 });
    const first = deliveries.data.deliveries.find((delivery) => delivery.eventId === call.headers['webhook-id']);
    expect(first).toBeDefined();
    const retried = await partner.retryWebhookDelivery(endpointId, first!.id);
    expect(retried.status).toBe(202);
    const again = () => receiver.received.filter((r) => r.headers['webhook-id'] === call.headers['webhook-id']);
    await waitFor(() => again().length >= 2, { timeoutMs: 10_000, intervalMs: 25, failure: 'the retried delivery did not come' });
    const repeat = again().at(-1)!;
    expect(String(repeat.headers['webhook-signature']).split(' ')).toHaveLength(2);
    for (const secrets of [[secret, rotated.data.secret], [secret], [rotated.data.secret]]) {
      await expect(verifyWebhook(repeat.body, repeat.headers, secrets)).resolves.toMatchObject({ id: call.headers['webhook-id'] });
    }

    expect((await partner.deleteWebhookEndpoint(endpointId)).status).toBe(204);
    expect((await partner.listWebhookEndpoints()).data.endpoints.map((endpoint) => endpoint.id)).not.toContain(endpointId);
  });
});

const missingAgent = 'us-east-1:00000000-0000-4000-8000-000000000000';
const changeTypes = ['agent.disabled', 'agent.enabled'];

/** The cursor after the network's last event so far. */
async function caughtUp(partner: PartnerClient): Promise<string> {
  let cursor = '';
  for await (const page of partner.eventPages({ limit: 500 })) cursor = page.nextCursor;
  return cursor;
}

describe('bulk status changes through the client', () => {
  it('mixed results typed per change; a reset after the commit repeated with the same key, made once; the batch read back', async () => {
    const [disabled, enabled] = [await db.agent(networkId), await db.agent(networkId)];
    await db.campaigns(disabled, 2);
    const port = Number(new URL(service.baseUrl).port);
    const proxy = await startTcpProxy({ host: '127.0.0.1', port }, { marker: disabled, count: 1, answers: 'reset' });
    const attempts: Attempt[] = [];
    try {
      const partner = client({ baseUrl: `http://127.0.0.1:${proxy.port}`, attempts, retry: { baseDelayMs: 20 } });
      const changes = [
        { agentId: disabled, enabled: false },
        { agentId: enabled, enabled: true },
        { agentId: missingAgent, enabled: false },
      ];
      const answer = await partner.changeStatuses(changes);
      expect(proxy.held()).toBe(1);
      expect(attempts.map((a) => a.status)).toEqual(['error', 200]);
      expect(attempts[1]!.idempotencyKey).toBe(attempts[0]!.idempotencyKey);
      expect(answer).toMatchObject({ status: 200, replayed: true, batchId: expect.stringMatching(/^[0-9a-f-]{36}$/) });
      if (answer.status !== 200) throw new Error('narrowing');
      expect(answer.data.results.map((result) => [result.agentId, result.status])).toEqual([
        [disabled, 200],
        [enabled, 200],
        [missingAgent, 404],
      ]);
      expect(answer.data.results[0]!.body).toMatchObject({ agentId: disabled, enabled: false, pausedCampaignCount: 2 });
      expect(answer.data.results[2]!.body).toMatchObject({ type: 'urn:partner-agent-status:problem:not-found' });
      expect(await db.changeCount(disabled)).toBe(1);

      const read = await client().getStatusBatch(answer.batchId);
      expect(read.data).toEqual(answer.data);
    } finally {
      await proxy.close();
    }
  });

  it('respond-async answers 202 with the batch Location; an unknown batch is a typed 404', async () => {
    const agentId = await db.agent(networkId);
    const partner = client();
    const answer = await partner.changeStatuses([{ agentId, enabled: false }], { respondAsync: true, idempotencyKey: `batch-${agentId}` });
    expect(answer.status).toBe(202);
    if (answer.status !== 202) throw new Error('narrowing');
    expect(answer.data.changeCount).toBe(1);
    expect(answer.location).toContain(answer.batchId);
    const results = await waitFor(
      async () => {
        const { data } = await partner.getStatusBatch(answer.batchId);
        return data.results[0]?.status === 200 ? data.results : undefined;
      },
      { timeoutMs: 10_000, intervalMs: 50, failure: 'the batch did not finish' },
    );
    expect(results).toMatchObject([{ agentId, status: 200, body: { enabled: false } }]);
    const missing = await rejection(partner.getStatusBatch('00000000-0000-4000-8000-000000000000'));
    expect(missing).toMatchObject({ name: 'PartnerApiError', status: 404, type: 'urn:partner-agent-status:problem:not-found' });
  });
});

describe('the events feed through the client', () => {
  it('pages follow nextCursor while hasMore, filtered by type and agent', async () => {
    const partner = client();
    const [first, second] = [await db.agent(networkId), await db.agent(networkId)];
    const start = await caughtUp(partner);
    await partner.setAgentStatus({ agentId: first, enabled: false });
    await partner.setAgentStatus({ agentId: second, enabled: false });
    await partner.setAgentStatus({ agentId: first, enabled: true });
    const read = async (filter: { agentId?: string }) => {
      const pages = [];
      for await (const page of partner.eventPages({ after: start, limit: 2, types: changeTypes, ...filter })) pages.push(page);
      return pages;
    };
    const count = async () => (await read({})).flatMap((page) => page.events).filter((e) => [first, second].includes(e.subject)).length;
    const pages = await waitFor(async () => ((await count()) >= 3 ? read({}) : undefined), {
      timeoutMs: 10_000,
      intervalMs: 50,
      failure: 'the changes did not reach the feed',
    });
    // hasMore is true on every page but the last (a page may come empty when the feed could not
    // know it was caught up); none holds more than the limit.
    expect(pages.length).toBeGreaterThanOrEqual(2);
    expect(pages.map((page) => page.hasMore)).toEqual([...pages.slice(1).map(() => true), false]);
    expect(Math.max(...pages.map((page) => page.events.length))).toBe(2);
    // (An event committed before `start` may reach the feed after it: only this test's agents count.)
    const ours = pages.flatMap((page) => page.events).filter((event) => [first, second].includes(event.subject));
    expect(ours.map((event) => [event.type, event.subject])).toEqual([
      ['partner-agent-status.agent.disabled', first],
      ['partner-agent-status.agent.disabled', second],
      ['partner-agent-status.agent.enabled', first],
    ]);
    const ofFirst = (await read({ agentId: first })).flatMap((page) => page.events.map((event) => event.type));
    expect(ofFirst).toEqual(['partner-agent-status.agent.disabled', 'partner-agent-status.agent.enabled']);
  });

  it('the live listener cut mid-stream resumes without a gap or a repeat', { timeout: 60_000 }, async () => {
    const partner = client();
    const agents = [await db.agent(networkId), await db.agent(networkId), await db.agent(networkId)];
    const start = await caughtUp(partner);
    const port = Number(new URL(service.baseUrl).port);
    const proxy = await startTcpProxy({ host: '127.0.0.1', port });
    const stop = new AbortController();
    const reconnects: unknown[] = [];
    const seen: ListenedEvent[] = [];
    const listener = client({ baseUrl: `http://127.0.0.1:${proxy.port}`, retry: { maxAttempts: 2, baseDelayMs: 20 } }).listenToEvents({
      after: start,
      types: changeTypes,
      signal: stop.signal,
      idleTimeoutMs: 2_000,
      reconnect: { baseDelayMs: 50, maxDelayMs: 500 },
      onReconnect: ({ error }) => reconnects.push(error),
    });
    const reading = (async () => {
      for await (const event of listener) seen.push(event);
    })();
    const made: Array<[boolean, string]> = [];
    const change = async (agentId: string, enabled: boolean) => {
      await partner.setAgentStatus({ agentId, enabled });
      made.push([enabled, agentId]);
    };
    // Only this test's agents count (an event committed before `start` may reach the feed after it).
    const ours = () => seen.filter(({ event }) => agents.includes(event.subject));
    const seenAtLeast = (count: number, failure: string) =>
      waitFor(() => ours().length >= count, { timeoutMs: 15_000, intervalMs: 25, failure: `${failure} (${seen.length} seen)` });
    try {
      await change(agents[0]!, false);
      await seenAtLeast(1, 'the first event did not stream');
      // Reset: every connection closed, new ones refused while changes are made.
      proxy.cut();
      await change(agents[0]!, true);
      await change(agents[1]!, false);
      await waitFor(() => reconnects.length >= 2, { timeoutMs: 10_000, intervalMs: 25, failure: 'no reconnect was refused' });
      proxy.restore();
      await seenAtLeast(3, 'the changes made during the cut did not stream');
      // Black hole: the open stream goes silent without a reset; the idle timeout notices.
      const before = reconnects.length;
      proxy.stall();
      await change(agents[2]!, false);
      await change(agents[1]!, true);
      await seenAtLeast(5, 'the changes made while stalled did not stream');
      expect(reconnects.length).toBeGreaterThan(before);
    } finally {
      stop.abort();
      await reading;
      await proxy.close();
    }
    const typeOf = (enabled: boolean) => `partner-agent-status.agent.${enabled ? 'enabled' : 'disabled'}`;
    expect(ours().map(({ type, event }) => [type, event.subject])).toEqual(made.map(([enabled, agentId]) => [typeOf(enabled), agentId]));
    // The same events, once each and in order, as the pages hold them (the listener stopped at some
    // point of them); each cursor new.
    const paged = [];
    for await (const page of partner.eventPages({ after: start, types: changeTypes })) paged.push(...page.events.map((event) => event.id));
    expect(seen.map(({ event }) => event.id)).toEqual(paged.slice(0, seen.length));
    expect(new Set(seen.map(({ id }) => id)).size).toBe(seen.length);
  });

  it('a cursor older than the retention is a typed 410 from the pages and ends the listener', async () => {
    const partner = client();
    await partner.setAgentStatus({ agentId: await db.agent(networkId), enabled: false });
    const { data } = await partner.listEvents({ limit: 1 });
    const [, batch] = Buffer.from(data.nextCursor, 'base64url').toString().split(':');
    // The batches up to the cursor's are made older than the retention (30 days), as if time had passed.
    await db.pool.query(`UPDATE event_batches SET created_at = now() - interval '31 days' WHERE id <= $1`, [batch]);
    const gone = await rejection(partner.listEvents({ after: data.nextCursor }));
    expect(gone).toBeInstanceOf(PartnerApiError);
    expect(gone).toMatchObject({ status: 410, type: 'urn:partner-agent-status:problem:events-gone' });
    const listened = rejection(
      (async () => {
        for await (const _ of partner.listenToEvents({ after: data.nextCursor })) throw new Error('an event after a gone cursor');
      })(),
    );
    expect(await listened).toMatchObject({ name: 'PartnerApiError', status: 410 });
  });
});
