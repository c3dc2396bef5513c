// The spend-management client (docs/interfaces.md §6) against plain node:http servers on loopback:
// what each kind of answer becomes. The simulator covers the happy path and outages end to end.
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { DependencyError } from '../../src/observability/dependency-calls.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { createSpendManagementClient } from '../../src/stores/spend-management.js';

const servers: Server[] = [];
const closeAll = () =>
  Promise.all(
    servers.splice(0).map(
      (server) =>
        new Promise((resolve) => {
          server.close(resolve);
          server.closeAllConnections();
        }),
    ),
  );
afterEach(closeAll);

interface Seen {
  method: string | undefined;
  url: string | undefined;
  headers: IncomingMessage['headers'];
  body: string;
}

async function serve(answer: (seen: Seen, response: ServerResponse) => void): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((request, response) => {
    let body = '';
    request.on('data', (chunk: Buffer) => {
      body += chunk.toString();
    });
    request.on('end', () => {
      const one = { method: request.method, url: request.url, headers: request.headers, body };
      seen.push(one);
      answer(one, response);
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

const token = `sm_${randomBytes(24).toString('base64url')}`;
const ids = [randomUUID(), randomUUID(), randomUUID()];

const clients: Array<{ close: () => Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(clients.splice(0).map((spend) => spend.close()));
});

function client(baseUrl: string, timeoutMs = 2_000) {
  const metrics = createMetrics();
  const spend = createSpendManagementClient({ baseUrl, token, timeoutMs, metrics, log: pino({ level: 'silent' }) });
  clients.push(spend);
  return { metrics, spend };
}

async function failureOf(call: Promise<unknown>): Promise<DependencyError> {
  const error = await call.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error).toBeInstanceOf(DependencyError);
  expect((error as Error).message).not.toContain(token);
  return error as DependencyError;
}

describe('spend-management client', () => {
  it('posts the ids with the bearer token and an idempotency key, and confirms what the answer lists', async () => {
    const { url, seen } = await serve((_seen, response) => {
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ paused: [ids[0], ids[2], 'not-asked'] }));
    });
    const { spend } = client(`${url}/base`);
    expect(await spend.pauseSpendingPeriods(ids, randomUUID())).toEqual({ confirmed: [ids[0], ids[2]] });
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ method: 'POST', url: '/base/v1/spending-periods/pause' });
    expect(seen[0]!.headers.authorization).toBe(`Bearer ${token}`);
    expect(seen[0]!.headers['content-type']).toBe('application/json');
    expect(seen[0]!.headers['idempotency-key']).toMatch(/^[0-9a-f-]{36}$/);
    expect(JSON.parse(seen[0]!.body)).toEqual({ campaignIds: ids, reason: 'agent-disabled' });
  });

  it('does not follow a redirect (the token goes to the configured origin only): a 3xx is a bad answer', async () => {
    const elsewhere = await serve((_seen, response) => response.writeHead(200).end('{"paused":[]}'));
    const { url } = await serve((_seen, response) => response.writeHead(307, { location: `${elsewhere.url}/steal` }).end());
    const failure = await failureOf(client(url).spend.pauseSpendingPeriods(ids, randomUUID()));
    expect(failure).toMatchObject({ reason: 'bad_response', status: 307 });
    expect(elsewhere.seen).toHaveLength(0);
  });

  it('turns 401 and 403 into unauthorized (counted and logged) and other statuses into bad_response', async () => {
    let status = 401;
    const { url } = await serve((_seen, response) => response.writeHead(status).end('no'));
    const { spend, metrics } = client(url);
    expect(await failureOf(spend.pauseSpendingPeriods(ids, randomUUID()))).toMatchObject({ reason: 'unauthorized', status: 401 });
    status = 403;
    expect(await failureOf(spend.pauseSpendingPeriods(ids, randomUUID()))).toMatchObject({ reason: 'unauthorized', status: 403 });
    status = 503;
    expect(await failureOf(spend.pauseSpendingPeriods(ids, randomUUID()))).toMatchObject({ reason: 'bad_response', status: 503 });
    const counted = await metrics.spendManagementAuthFailures.get();
    expect(counted.values.map((value) => [value.labels.status, value.value]).sort()).toEqual([
      ['401', 1],
      ['403', 1],
    ]);
  });

  it('turns a 200 that is not JSON, or has no paused list, into bad_response', async () => {
    let body = 'paused: all of them';
    const { url } = await serve((_seen, response) => response.writeHead(200, { 'content-type': 'application/json' }).end(body));
    const { spend } = client(url);
    expect(await failureOf(spend.pauseSpendingPeriods(ids, randomUUID()))).toMatchObject({ reason: 'bad_response' });
    body = '{"ok":true}';
    expect(await failureOf(spend.pauseSpendingPeriods(ids, randomUUID()))).toMatchObject({ reason: 'bad_response' });
  });

  it('times out on an answer that never comes, and on a body that never ends', async () => {
    const { url } = await serve((seen, response) => {
      if (JSON.parse(seen.body).campaignIds.length === 1)
        response.writeHead(200, { 'content-type': 'application/json' }).write('{"paused":[');
    });
    const { spend } = client(url, 200);
    expect(await failureOf(spend.pauseSpendingPeriods(ids, randomUUID()))).toMatchObject({ reason: 'timeout' });
    expect(await failureOf(spend.pauseSpendingPeriods([ids[0]!], randomUUID()))).toMatchObject({ reason: 'timeout' });
  });

  it('turns a refused connection into unavailable with its code', async () => {
    const { url } = await serve(() => undefined);
    await closeAll();
    expect(await failureOf(client(url).spend.pauseSpendingPeriods(ids, randomUUID()))).toMatchObject({
      reason: 'unavailable',
      message: expect.stringContaining('ECONNREFUSED'),
    });
  });
});
