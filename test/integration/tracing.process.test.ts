import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { testEnvironment } from '../support/environment.js';
import { startOtlpReceiver } from '../support/otlp-receiver.js';
import { statusPath } from '../support/partner.js';
import { startServiceProcess } from '../support/process.js';
import { parseRawResponse, rawExchange } from '../support/raw-http.js';

// The built service as `npm start` starts it (telemetry preloaded), exporting over OTLP/HTTP JSON to
// a receiver in this test, so the assertions see exactly what would leave the process.
const db = testDatabase();
const key = newApiKey();
// A key from before the issued format (no pas_ prefix, Base64 with + / =): only the key set can tell it is one.
const legacyKey = `lk-${randomBytes(30).toString('base64')}`;
let networkId: string;
let environment: Awaited<ReturnType<typeof testEnvironment>>;
let simulator: typeof environment.simulator;

beforeAll(async () => {
  networkId = await db.network();
  environment = await testEnvironment([
    { key, networkId, name: 'traced-partner' },
    { key: legacyKey, networkId, name: 'legacy-partner' },
  ]);
  simulator = environment.simulator;
});

afterAll(async () => {
  await environment?.close();
  await db.close();
});

async function startTracedService(logLevel: string) {
  const receiver = await startOtlpReceiver();
  const service = await startServiceProcess({
    ...environment.env,
    LOG_LEVEL: logLevel,
    DRAIN_DELAY_MS: '0',
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '50',
  });
  return { receiver, service, port: Number(new URL(service.baseUrl).port) };
}

const serverSpanOf = (spans: Awaited<ReturnType<typeof startOtlpReceiver>>['spans'], route: string) =>
  spans.find((span) => span.kind === 2 && span.attributes['http.route'] === route);

// A trace context a partner might send: the service must start its own trace instead.
const partnerTraceId = '4bf92f3577b34da6a3ce929d0e0e4736';
const partnerTraceparent = `00-${partnerTraceId}-00f067aa0ba902b7-01`;

describe('traces: one disable is one trace, with PostgreSQL, Redis and spend-management spans', () => {
  it('exports the server span (named by route), the use case, pg, ioredis and the spend call in one trace, and propagates it to spend management', async () => {
    const { receiver, service } = await startTracedService('info');
    try {
      const agentId = await db.agent(networkId);
      await db.campaigns(agentId, 3);
      const before = simulator.simulator.requests().length;
      const response = await fetch(`${service.baseUrl}/partner/agents/status`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': key, traceparent: partnerTraceparent },
        body: JSON.stringify({ agentId, enabled: false }),
      });
      expect(response.status).toBe(200);

      await receiver.waitFor((spans) => {
        const root = serverSpanOf(spans, statusPath);
        const inTrace = spans.filter((span) => span.traceId === root?.traceId);
        return ['ioredis', 'pg', 'undici', 'partner-agent-status'].every((scope) => inTrace.some((span) => span.scope.includes(scope)));
      });
      const root = serverSpanOf(receiver.spans, statusPath)!;
      const trace = receiver.spans.filter((span) => span.traceId === root.traceId);
      expect(new Set(trace.map((span) => span.scope))).toEqual(
        new Set([
          '@opentelemetry/instrumentation-http',
          '@opentelemetry/instrumentation-pg',
          '@opentelemetry/instrumentation-ioredis',
          '@opentelemetry/instrumentation-undici',
          'partner-agent-status',
        ]),
      );
      // The partner's trace context was not adopted: a trace of our own, with no parent.
      expect(root.traceId).not.toBe(partnerTraceId);
      expect(root.parentSpanId).toBeUndefined();

      // The framework adds no span of its own (none per request, hook or handler): the server span
      // is the request's, named by its route, and the use case hangs right under it.
      expect(root.name).toBe('POST /partner/agents/status');
      expect(trace.filter((span) => span.kind === 2)).toHaveLength(1);

      // Statements as exported: SQL on one line, a Redis command with at most three arguments.
      const queries = trace
        .filter((span) => span.scope === '@opentelemetry/instrumentation-pg')
        .map((span) => String(span.attributes['db.query.text']));
      expect(queries.length).toBeGreaterThan(0);
      for (const text of queries) expect(text).toMatch(/^\S.*\S$/);
      for (const text of queries) expect(text).not.toMatch(/\s{2}|\n/);
      const commands = trace
        .filter((span) => span.scope === '@opentelemetry/instrumentation-ioredis')
        .map((span) => String(span.attributes['db.query.text']));
      expect(commands.length).toBeGreaterThan(0);
      for (const text of commands) expect(text.split(' ').length).toBeLessThanOrEqual(5);
      // The rate limit (on by default) runs outside the trace: every Redis span is the batch's mark.
      for (const text of commands) expect(text).toContain('campaign:');

      const useCase = trace.find((span) => span.name === 'agent.set_status')!;
      expect(useCase.parentSpanId).toBe(root.spanId);
      expect(useCase.attributes).toMatchObject({
        'agent.id': agentId,
        'network.id': networkId,
        'agent.enabled': false,
        'campaigns.paused_count': 3,
      });
      expect(trace.some((span) => span.attributes['partner.name'] === 'traced-partner')).toBe(true);
      const spendCall = trace.find(
        (span) => span.kind === 3 && String(span.attributes['url.full'] ?? '').includes('/v1/spending-periods/pause'),
      );
      expect(spendCall).toBeDefined();

      const call = simulator.simulator.requests().slice(before)[0]!;
      expect(call.traceparent).toMatch(new RegExp(`^00-${root.traceId}-[0-9a-f]{16}-01$`));

      // The request's log line carries the same trace id.
      const line = await service.logLine((record) => record.msg === 'request completed' && record.agentId === agentId);
      expect(line.traceId).toBe(root.traceId);
    } finally {
      expect(await service.stop()).toBe(0);
      await receiver.close();
    }
  });
});

describe('redaction: a key sent anywhere reaches no log line, no exported span and no dependency', () => {
  it('at LOG_LEVEL=trace with tracing on: key in x-api-key, query strings, a malformed request, x-request-id and baggage', async () => {
    const { receiver, service, port } = await startTracedService('trace');
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 2);
    const before = simulator.simulator.requests().length;
    let stopped = false;
    try {
      // The key where it belongs, and pasted into every other place a partner could put it.
      const disable = await fetch(`${service.baseUrl}/partner/agents/status?api_key=${key}`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-api-key': key,
          'x-request-id': key,
          baggage: `partner.key=${key},api_key=${key}`,
          traceparent: partnerTraceparent,
        },
        body: JSON.stringify({ agentId, enabled: false }),
      });
      expect(disable.status).toBe(200);
      expect(disable.headers.get('x-request-id')).not.toBe(key);

      const read = await fetch(`${service.baseUrl}/partner/agents/${agentId}/status?x-api-key=${key}`, { headers: { 'x-api-key': key } });
      expect(read.status).toBe(200);
      const keyInQueryOnly = await fetch(`${service.baseUrl}/partner/agents/${agentId}/status?api_key=${key}`);
      expect(keyInQueryOnly.status).toBe(401);
      const unknownRoute = await fetch(`${service.baseUrl}/partner/nothing-here?api_key=${key}`, { headers: { 'x-api-key': key } });
      expect(unknownRoute.status).toBe(404);
      expect(await unknownRoute.text()).not.toContain(key);

      // A request Node cannot parse: its raw bytes (the key among them) are the only record of it.
      const malformed = parseRawResponse(
        await rawExchange(
          port,
          `POST /partner/agents/status?api_key=${key} HTTP/1.1\r\nhost: x\r\nx-api-key: ${key}\r\nx-request-id: ${key}\r\nnot a header\r\n\r\n`,
        ),
      );
      expect(malformed.status).toBe(400);
      expect(malformed.headers['content-type']).toBe('application/problem+json');
      const requestId = malformed.headers['x-request-id'];
      expect(requestId).toMatch(/^[0-9a-f-]{36}$/);
      expect(JSON.parse(malformed.body)).toMatchObject({ type: 'urn:partner-agent-status:problem:validation', status: 400, requestId });
      expect(
        parseRawResponse(await rawExchange(port, `GET /partner/docs HTTP/1.1\r\nx-api-key: ${key}\r\nx-pad: ${'k'.repeat(20_000)}\r\n\r\n`))
          .status,
      ).toBe(431);

      // Everything exported: the query-string requests' spans are among them.
      await receiver.waitFor((spans) => {
        const queried = spans.filter((span) => span.kind === 2 && span.attributes['url.query'] !== undefined);
        return (
          queried.length >= 4 &&
          spans.some((span) => span.kind === 3 && String(span.attributes['url.full'] ?? '').includes('/v1/spending-periods/pause'))
        );
      });
      expect(await service.stop()).toBe(0);
      stopped = true;

      const serverSpans = receiver.spans.filter((span) => span.kind === 2);
      expect(new Set(serverSpans.map((span) => span.attributes['url.query']).filter((query) => query !== undefined))).toEqual(
        new Set(['REDACTED']),
      );
      expect(serverSpans.every((span) => !String(span.attributes['url.path']).includes('?'))).toBe(true);
      expect(receiver.spans.every((span) => span.traceId !== partnerTraceId)).toBe(true);
      expect(receiver.bodies.length).toBeGreaterThan(0);
      for (const body of receiver.bodies) expect(body).not.toContain(key);

      const logs = service.output.join('\n');
      expect(service.output.some((line) => line.includes('"level":"debug"') || line.includes('"level":"trace"'))).toBe(true);
      expect(service.output.some((line) => line.includes('malformed request rejected') && line.includes(requestId!))).toBe(true);
      expect(logs).not.toContain(key);

      // Spend management saw our traceparent and nothing of the partner's baggage.
      const calls = simulator.simulator.requests().slice(before);
      expect(calls.length).toBeGreaterThan(0);
      for (const call of calls) {
        expect(call.baggage).toBeUndefined();
        expect(call.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
        expect(call.traceparent).not.toContain(partnerTraceId);
        expect(JSON.stringify(call)).not.toContain(key);
      }
    } finally {
      if (!stopped) await service.stop();
      await receiver.close();
    }
  });
});

describe('redaction: a key anywhere in a request, at LOG_LEVEL=trace with tracing on', () => {
  it('reaches no log line, no exported span and no answer, whatever part of the request holds it', async () => {
    const { receiver, service, port } = await startTracedService('trace');
    const agentId = await db.agent(networkId);
    const answers: string[] = [];
    const send = async (bytes: string) => answers.push(await rawExchange(port, bytes, { keepOpen: true }));
    let stopped = false;
    try {
      for (const [valid, pasted] of [
        [key, legacyKey],
        [legacyKey, key],
      ] as const) {
        const auth = `x-api-key: ${valid}\r\n`;
        const body = (text: string) => `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\n\r\n${text}`;
        // The path, as a parameter, past a route, and where no route is.
        await send(`GET /partner/agents/${pasted}/status HTTP/1.1\r\nhost: x\r\n${auth}connection: close\r\n\r\n`);
        await send(`GET /partner/nothing/${pasted} HTTP/1.1\r\nhost: x\r\n${auth}connection: close\r\n\r\n`);
        await send(`GET /${pasted} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`);
        await send(`DELETE /partner/agents/${pasted}/status HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`);
        // The query, as a value and as a name.
        await send(`GET /partner/agents/${agentId}/status?key=${pasted}&${pasted} HTTP/1.1\r\nhost: x\r\n${auth}connection: close\r\n\r\n`);
        // Every header: Host, the user agent, the request id, a cookie, Authorization, the content type, any other.
        await send(
          `POST /partner/agents/status HTTP/1.1\r\nhost: ${pasted}\r\nuser-agent: client/${pasted}\r\nx-request-id: req-${pasted}\r\n` +
            `cookie: session=${pasted}\r\nauthorization: Bearer ${pasted}\r\nreferer: https://example.com/${pasted}\r\nx-anything: ${pasted}\r\n` +
            `accept: ${pasted}\r\n${auth}connection: close\r\n${body(JSON.stringify({ agentId, enabled: true }))}`,
        );
        await send(
          `POST /partner/agents/status HTTP/1.1\r\nhost: x\r\n${auth}connection: close\r\ncontent-type: application/json; x=${pasted}\r\ncontent-length: 2\r\n\r\n{}`,
        );
        // The body: a member name, a member value, text that is not JSON.
        await send(`POST /partner/agents/status HTTP/1.1\r\nhost: x\r\n${auth}connection: close\r\n${body(`{"${pasted}":1}`)}`);
        await send(
          `POST /partner/agents/status HTTP/1.1\r\nhost: x\r\n${auth}connection: close\r\n${body(JSON.stringify({ agentId: pasted, enabled: true }))}`,
        );
        await send(`POST /partner/agents/status HTTP/1.1\r\nhost: x\r\n${auth}connection: close\r\n${body(pasted)}`);
        // Malformed request lines and headers, a bad URL, CONNECT.
        await send(`GET /partner/${pasted} HTTP/1.1 nonsense\r\nhost: x\r\n\r\n`);
        await send(`GET /partner/agents/status HTTP/1.1\r\nhost: x\r\n${pasted}\r\n\r\n`);
        await send(`GET /partner/%zz${pasted} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`);
        await send(`CONNECT ${pasted}:443 HTTP/1.1\r\nhost: x\r\n\r\n`);
      }
      // The server spans of the requests above (the malformed ones have none).
      await receiver.waitFor((spans) => spans.filter((span) => span.kind === 2).length >= 20);
      expect(await service.stop()).toBe(0);
      stopped = true;

      expect(answers).toHaveLength(28);
      for (const answer of answers) expect(answer.length).toBeGreaterThan(0);
      const exported = receiver.bodies.join('\n');
      const logs = service.output.join('\n');
      for (const secret of [key, legacyKey]) {
        for (const answer of answers) expect(answer).not.toContain(secret);
        expect(exported).not.toContain(secret);
        expect(logs).not.toContain(secret);
      }
      // The user agent is not exported; a request no route matches is exported by the not-found template.
      expect(receiver.spans.some((span) => 'user_agent.original' in span.attributes)).toBe(false);
      expect(receiver.spans.some((span) => span.attributes['url.path'] === '/*')).toBe(true);
      expect(service.output.some((line) => line.includes('"level":"trace"') || line.includes('"level":"debug"'))).toBe(true);
    } finally {
      if (!stopped) await service.stop();
      await receiver.close();
    }
  });
});
