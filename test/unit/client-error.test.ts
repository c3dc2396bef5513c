import { randomBytes } from 'node:crypto';
import { createServer as createHttpServer } from 'node:http';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientErrorHandler } from '../../src/http/malformed-http.js';
import { createLogger } from '../../src/observability/logger.js';
import { parseRawResponse, rawExchange } from '../support/raw-http.js';
import { logCapture } from '../support/service.js';

// A key as a partner would send it; made at run time, never written anywhere.
const key = `pk_test_${randomBytes(24).toString('base64url')}`;
const logs = logCapture();
// Node checks header and request time-outs every connectionsCheckingInterval (30 s by default):
// short ones let the 408 path run for real.
const app = Fastify({
  loggerInstance: createLogger('trace', logs.stream),
  clientErrorHandler,
  serverFactory: (handler) => createHttpServer({ connectionsCheckingInterval: 50, headersTimeout: 300, requestTimeout: 300 }, handler),
});
app.get('/partner/x', async () => ({ ok: true }));
let port: number;

beforeAll(async () => {
  await app.listen({ port: 0, host: '127.0.0.1' });
  port = (app.server.address() as { port: number }).port;
});
afterAll(() => app.close());

const exchange = (bytes: string, opts?: { keepOpen?: boolean }) => rawExchange(port, bytes, opts);
const parse = (raw: string) => {
  const answer = parseRawResponse(raw);
  return { ...answer, json: JSON.parse(answer.body) as Record<string, unknown> };
};

function expectProblemAnswer(raw: string, status: number, kind: string) {
  const answer = parse(raw);
  expect(answer.statusLine).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
  expect(answer.headers['content-type']).toBe('application/problem+json');
  expect(answer.headers.connection).toBe('close');
  expect(Number(answer.headers['content-length'])).toBe(Buffer.byteLength(answer.body, 'latin1'));
  expect(answer.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  expect(answer.json).toMatchObject({
    type: `urn:partner-agent-status:problem:${kind}`,
    status,
    requestId: answer.headers['x-request-id'],
  });
  expect(typeof answer.json.title).toBe('string');
  expect(typeof answer.json.detail).toBe('string');
  return answer;
}

describe('a request Node cannot parse gets problem+json with a fresh request id, and its bytes are never logged', () => {
  it('answers a malformed request line with a 400 validation problem', async () => {
    const raw = await exchange(
      `GET /partner/x?api_key=${key} HTTP/1.1 nonsense\r\nhost: x\r\nx-api-key: ${key}\r\nx-request-id: ${key}\r\n\r\n`,
    );
    const answer = expectProblemAnswer(raw, 400, 'validation');
    // The sent x-request-id (here a key) is never read from bytes Node rejected.
    expect(answer.headers['x-request-id']).not.toBe(key);
    expect(raw).not.toContain(key);
  });

  it('answers a malformed header with 400', async () => {
    expectProblemAnswer(await exchange(`GET /partner/x HTTP/1.1\r\nhost: x\r\nx-api-key ${key}\r\n\r\n`), 400, 'validation');
  });

  it('answers a header section over the limit with 431', async () => {
    const raw = await exchange(`GET /partner/x HTTP/1.1\r\nhost: x\r\nx-api-key: ${key}\r\nx-filler: ${'a'.repeat(20_000)}\r\n\r\n`);
    expectProblemAnswer(raw, 431, 'request-header-fields-too-large');
  });

  it('answers a request not received in time with 408', async () => {
    // Headers never finished: the server's request time-out ends it.
    const raw = await exchange(`GET /partner/x HTTP/1.1\r\nhost: x\r\nx-api-key: ${key}\r\n`, { keepOpen: true });
    expectProblemAnswer(raw, 408, 'request-timeout');
  });

  it('logs the code and the request id only, never the received bytes, even at trace level', () => {
    const lines = logs.records().filter((line) => line.msg === 'malformed request rejected');
    expect(lines.length).toBeGreaterThanOrEqual(4);
    for (const line of lines) {
      expect(Object.keys(line).sort()).toEqual(['code', 'level', 'msg', 'requestId', 'service', 'statusCode', 'time']);
    }
    expect(new Set(lines.map((line) => line.code))).toEqual(
      new Set(['HPE_INVALID_VERSION', 'HPE_INVALID_HEADER_TOKEN', 'HPE_HEADER_OVERFLOW', 'ERR_HTTP_REQUEST_TIMEOUT']),
    );
    expect(logs.lines.join('\n')).not.toContain(key);
  });

  it('still serves well-formed requests on the same server', async () => {
    const answer = parse(await exchange('GET /partner/x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n'));
    expect(answer.statusLine).toMatch(/^HTTP\/1\.1 200 /);
  });
});
