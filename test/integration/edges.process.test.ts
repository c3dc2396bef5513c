import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { postStatus, statusPath, urls } from '../support/partner.js';
import { startServiceProcess } from '../support/process.js';
import { processEnvironment } from '../support/process-environment.js';
import { parseRawResponse, parseRawResponses, rawExchange } from '../support/raw-http.js';

// Issue 18, items 1, 2, 4 and 5, on the wire: the built service as `npm start` starts it, spoken to
// with raw sockets, one request shape at a time.
const db = testDatabase();
const key = newApiKey();
let networkId: string;
let environment: Awaited<ReturnType<typeof processEnvironment>>;
let service: Awaited<ReturnType<typeof startServiceProcess>>;
let port: number;

beforeAll(async () => {
  networkId = await db.network();
  environment = await processEnvironment([{ key, networkId, name: 'edges-partner' }], { OTEL_SDK_DISABLED: 'true', DRAIN_DELAY_MS: '0' });
  service = await startServiceProcess(environment.env);
  port = Number(new URL(service.baseUrl).port);
});

afterAll(async () => {
  await service?.stop();
  await environment?.close();
  await db.close();
});

/** Sends the bytes and keeps the socket open until the service closes it (a half-closed client is a client gone). */
const exchange = (bytes: string) => rawExchange(port, bytes, { keepOpen: true });

function expectProblemShape(answer: ReturnType<typeof parseRawResponse>, status: number, kind: string) {
  expect(answer.status, answer.body).toBe(status);
  expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/);
  expect(answer.headers['x-content-type-options']).toBe('nosniff');
  expect(answer.headers['cache-control']).toBe('no-store');
  const requestId = answer.headers['x-request-id'];
  expect(requestId).toMatch(/^[0-9a-f-]{36}$/);
  const body = JSON.parse(answer.body) as Record<string, unknown>;
  expect(body).toMatchObject({ type: `urn:partner-agent-status:problem:${kind}`, status, requestId });
  expect(typeof body.title).toBe('string');
  expect(typeof body.detail).toBe('string');
  return body;
}

const accessLine = (requestId: string) => service.logLine((record) => record.msg === 'request completed' && record.requestId === requestId);

describe('item 1: malformed input after a request in flight (pipelining, one TCP write)', () => {
  it('answers the valid enable first, then the malformed request, then closes; the enable is applied and logged', async () => {
    const agentId = await db.agent(networkId, { approved: false });
    const body = JSON.stringify({ agentId, enabled: true });
    const raw = await exchange(
      `POST /partner/agents/status HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-api-key: ${key}\r\n` +
        `x-request-id: pipelined-enable-1\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}` +
        'GET /partner/openapi.json HTTP/1.1\r\nhost: x\r\nx-bad: a\u0001b\r\n\r\n',
    );
    const [enable, malformed, ...more] = parseRawResponses(raw);
    expect(more).toEqual([]);
    expect(enable!.status).toBe(200);
    expect(JSON.parse(enable!.body)).toMatchObject({ agentId, enabled: true });
    const problem = expectProblemShape(malformed!, 400, 'validation');
    expect(malformed!.headers.connection).toBe('close');
    expect(String(problem.detail)).not.toMatch(/nothing was changed/i);
    expect(await db.agentApproved(agentId)).toBe(true);
    expect(await accessLine('pipelined-enable-1')).toMatchObject({ statusCode: 200, agentId, outcome: 'updated' });
    // The malformed request has its one line (no request object, so no access line) and its latency sample.
    await service.logLine(
      (record) => record.msg === 'malformed request rejected' && record.requestId === malformed!.headers['x-request-id'],
    );
    const metrics = await (await fetch(`${service.metricsUrl}/metrics`)).text();
    expect(metrics).toMatch(/http_request_duration_seconds_count\{method="unparsed",route="unmatched",status_code="400"\} [1-9]/);
  });
});

describe('item 2: one access line and one latency sample for every request, whatever its end', () => {
  it('logs a disable whose client left before the answer when its work ends, with outcome client_gone', async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 3);
    environment.simulator.simulator.setMode('slow', { delayMs: 800 });
    try {
      const body = JSON.stringify({ agentId, enabled: false });
      const socket = connect(port, '127.0.0.1');
      await new Promise((resolve) => socket.once('connect', resolve));
      socket.write(
        `POST /partner/agents/status HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-api-key: ${key}\r\n` +
          `x-request-id: gone-disable-1\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      socket.destroy();
      const line = await accessLine('gone-disable-1');
      expect(line).toMatchObject({ outcome: 'client_gone', statusCode: 499, unsentStatusCode: 200, workOutcome: 'updated', agentId });
      expect(Number(line.durationMs)).toBeGreaterThanOrEqual(700);
      expect(await db.pausedIds(agentId)).toHaveProperty('size', 3);
    } finally {
      environment.simulator.simulator.setMode('ok');
    }
    const metrics = await (await fetch(`${service.metricsUrl}/metrics`)).text();
    expect(metrics).toMatch(/http_request_duration_seconds_count\{method="POST",route="\/partner\/agents\/status",status_code="499"\} 1/);
    expect(service.output.filter((text) => text.includes('gone-disable-1'))).toHaveLength(1);
  });

  it('logs and counts a request the framework refused (bad percent-encoding)', async () => {
    const answer = parseRawResponse(await exchange('GET /partner/agents/%E0%A4%A/status HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n'));
    expectProblemShape(answer, 400, 'validation');
    expect(await accessLine(answer.headers['x-request-id']!)).toMatchObject({ statusCode: 400, route: 'unmatched', method: 'GET' });
    const metrics = await (await fetch(`${service.metricsUrl}/metrics`)).text();
    expect(metrics).toMatch(/http_request_duration_seconds_count\{method="GET",route="unmatched",status_code="400"\} \d+/);
  });
});

describe('item 4: every answer, Node-level ones included, is problem+json with the usual headers', () => {
  const shapes: Array<[string, string, number, string]> = [
    ['HTTP/1.1 without Host', 'GET /partner/openapi.json HTTP/1.1\r\nconnection: close\r\n\r\n', 400, 'validation'],
    [
      'an Expect other than 100-continue',
      'POST /partner/agents/status HTTP/1.1\r\nhost: x\r\nexpect: 200-ok\r\ncontent-length: 0\r\nconnection: close\r\n\r\n',
      417,
      'expectation-failed',
    ],
    ['CONNECT', 'CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n', 405, 'method-not-allowed'],
    ['a bad URL', 'GET /partner/%zz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n', 400, 'validation'],
    ['an unknown route', 'GET /partner/nothing/here HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n', 404, 'not-found'],
  ];
  it.each(shapes)('%s', async (_name, bytes, status, kind) => {
    const answer = parseRawResponse(await exchange(bytes));
    const body = expectProblemShape(answer, status, kind);
    expect(JSON.stringify(body)).not.toContain('nothing/here');
    if (status === 405) expect(answer.headers.allow).toBe('');
  });

  const methods: Array<[string, string, string]> = [
    ['OPTIONS', statusPath, 'POST'],
    ['TRACE', statusPath, 'POST'],
    ['PUT', statusPath, 'POST'],
    ['PROPFIND', statusPath, 'POST'],
    ['OPTIONS', '/partner/agents/us-east-1:x/status', 'GET, HEAD'],
    ['TRACE', urls.openApi, 'GET, HEAD'],
    ['DELETE', '/livez', 'GET, HEAD'],
  ];
  it.each(methods)('%s %s is a 405 with Allow: %s', async (method, path, allow) => {
    const answer = parseRawResponse(
      await exchange(
        `${method} ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: text/plain\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi`,
      ),
    );
    expectProblemShape(answer, 405, 'method-not-allowed');
    expect(answer.headers.allow).toBe(allow);
  });
});

describe('item 5: strict content', () => {
  const post = (headers: Record<string, string>, body: string) =>
    fetch(`${service.baseUrl}/partner/agents/status`, { method: 'POST', headers: { 'x-api-key': key, ...headers }, body });

  it.each([
    ['application/json; charset=utf-16', 415],
    ['application/json; charset=latin1', 415],
    ['application/json; charset="iso-8859-1"', 415],
    ['Application/JSON; Charset=UTF-8', 200],
    ['application/json;charset="utf-8"', 200],
    ['application/json', 200],
  ])('Content-Type %s gets %i', async (contentType, status) => {
    const agentId = await db.agent(networkId);
    const response = await post({ 'content-type': contentType }, JSON.stringify({ agentId, enabled: true }));
    expect(response.status).toBe(status);
    if (status === 415) expect(await response.json()).toMatchObject({ type: 'urn:partner-agent-status:problem:unsupported-media-type' });
  });

  it('refuses any Content-Encoding with 415', async () => {
    const agentId = await db.agent(networkId);
    for (const encoding of ['gzip', 'identity', 'br']) {
      const response = await post(
        { 'content-type': 'application/json', 'content-encoding': encoding },
        JSON.stringify({ agentId, enabled: false }),
      );
      expect(response.status).toBe(415);
      expect(((await response.json()) as { detail: string }).detail).toMatch(/Content-Encoding/);
    }
    expect(await db.agentApproved(agentId)).toBe(true);
  });

  it('refuses a member name repeated in one object with 400, and acts on neither', async () => {
    const mine = await db.agent(networkId);
    const other = await db.agent(networkId);
    const response = await post({ 'content-type': 'application/json' }, `{"agentId":"${mine}","enabled":false,"agentId":"${other}"}`);
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({
      type: 'urn:partner-agent-status:problem:validation',
      detail: expect.stringMatching(/repeats a member name/),
    });
    expect(await db.agentApproved(mine)).toBe(true);
    expect(await db.agentApproved(other)).toBe(true);
  });
});

describe('item 6: unauthenticated traffic is shed before partners', () => {
  it('answers a flood of bad keys with held 503s once the process is busy, while a partner is still served', async () => {
    // Shedding from 1 % utilisation: any flood counts as busy here.
    const shedding = await startServiceProcess({ ...environment.env, OVERLOAD_UNAUTHENTICATED_UTILIZATION_PERCENT: '1' });
    try {
      const post = (apiKey: string, agentId: string) => postStatus(shedding.baseUrl, apiKey, agentId, true);
      const agentId = await db.agent(networkId);
      let shed: Response | undefined;
      // under-pressure samples utilisation every second: flood for a few of them.
      for (const until = Date.now() + 8_000; Date.now() < until && !shed; ) {
        const answers = await Promise.all(Array.from({ length: 150 }, () => post(`${key}x`, agentId)));
        expect(answers.every((answer) => answer.status === 401 || answer.status === 503)).toBe(true);
        shed = answers.find((answer) => answer.status === 503);
      }
      expect(shed).toBeDefined();
      expect(shed!.headers.get('retry-after')).toBe('1');
      expect(shed!.headers.get('connection')).toBe('close');
      expect(await shed!.json()).toMatchObject({ type: 'urn:partner-agent-status:problem:unavailable', status: 503 });
      expect((await post(key, agentId)).status).toBe(200);
    } finally {
      await shedding.stop();
    }
    // Bad keys' lines stay bounded when they are shed too: at most one a second (the test floods for under 10 s).
    const shedLines = shedding.output.filter((line) => line.includes('"outcome":"unauthenticated_shed"'));
    expect(shedLines.length).toBeGreaterThan(0);
    expect(shedLines.length).toBeLessThanOrEqual(10);
  });
});

describe('item 6: the reference page is served compressed and cacheable', () => {
  it('loads its script by an immutable, hashed name, gzipped', async () => {
    const page = await (await fetch(`${service.baseUrl}/partner/docs/`)).text();
    const name = /src="js\/(scalar\.[0-9a-f]{16}\.js)"/.exec(page)?.[1];
    expect(name).toBeDefined();
    const script = await fetch(`${service.baseUrl}/partner/docs/js/${name}`, { headers: { 'accept-encoding': 'gzip' } });
    expect(script.status).toBe(200);
    expect(script.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    expect(script.headers.get('content-encoding')).toBe('gzip');
    const etag = script.headers.get('etag')!;
    await script.arrayBuffer();
    const again = await fetch(`${service.baseUrl}/partner/docs/js/${name}`, { headers: { 'if-none-match': etag } });
    expect(again.status).toBe(304);
  });
});
