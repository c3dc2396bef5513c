import { randomBytes } from 'node:crypto';
import { ROOT_CONTEXT, type SpanContext, TraceFlags, trace } from '@opentelemetry/api';
import type { NodeSDKConfiguration } from '@opentelemetry/sdk-node';
import { describe, expect, it } from 'vitest';
import { issueKey } from '../../src/auth/issued-key.js';
// The preload does nothing when imported here: vitest sets OTEL_SDK_DISABLED=true.
import { egressOnlyTraceContext, redacted, scrubAttributes, scrubbingExporter, scrubSpan } from '../../src/telemetry.js';
import { statusPath } from '../support/partner.js';
import { slowOnes, worstCaseInputs } from '../support/worst-case.js';

type SpanExporter = NodeSDKConfiguration['traceExporter'];
type ReadableSpan = Parameters<SpanExporter['export']>[0][number];

const key = `pk_test_${randomBytes(24).toString('base64url')}`;
const spanContext: SpanContext = {
  traceId: '0af7651916cd43dd8448eb211c80319c',
  spanId: 'b7ad6b7169203331',
  traceFlags: TraceFlags.SAMPLED,
};

/** A span as the SDK hands it to an exporter (spanContext() is a method of its class). */
class FakeSpan {
  constructor(
    readonly name: string,
    readonly attributes: Record<string, unknown>,
    readonly events: Array<{ name: string; attributes?: Record<string, unknown>; time: [number, number] }> = [],
    readonly status: { code: number; message?: string } = { code: 0 },
  ) {}
  spanContext() {
    return spanContext;
  }
  get duration(): [number, number] {
    return [0, 1000];
  }
}
const asReadable = (span: FakeSpan) => span as unknown as ReadableSpan;

describe('span scrubbing: the last line before export', () => {
  it('overwrites string attributes that carry a credential, by value or by name', () => {
    const attributes = {
      'url.full': `http://spend/v1/x?api_key=${key}`,
      'url.query': `x-api-key=${key}`,
      'http.request.header.x-api-key': [key],
      'app.token': key,
      note: `authorization: Bearer ${key}`,
      'db.query.text': 'UPDATE agents SET agent_approved = $1 WHERE agent_id = $2',
      'http.response.status_code': 200,
    };
    const scrubbed = scrubAttributes(attributes);
    expect(scrubbed).toEqual({
      'url.full': redacted,
      'url.query': redacted,
      'http.request.header.x-api-key': redacted,
      'app.token': redacted,
      note: redacted,
      'db.query.text': attributes['db.query.text'],
      'http.response.status_code': 200,
    });
    expect(JSON.stringify(scrubbed)).not.toContain(key);
  });

  it('overwrites a partner key in the issued format even without a name before it', () => {
    const issued = issueKey();
    const scrubbed = scrubAttributes({ 'agent.id': issued, 'app.values': ['x', `${issued},y`], 'app.note': 'pas_ is our prefix' });
    expect(scrubbed).toEqual({ 'agent.id': redacted, 'app.values': redacted, 'app.note': 'pas_ is our prefix' });
  });

  it('checks a 16 KiB worst case in under 5 ms (the credential pattern cannot backtrack over a run twice)', () => {
    const prefixes = ['token', 'api_key', 'x-api-key', 'secret "', 'bearer', 'pas_', 'tokentoken'];
    expect(slowOnes((input) => scrubAttributes({ 'app.note': input }), worstCaseInputs(prefixes))).toEqual([]);
    // still found after the longest run
    expect(scrubAttributes({ 'app.note': `token${' '.repeat(16_384)}"  =x` })).toEqual({ 'app.note': redacted });
    expect(scrubAttributes({ 'app.note': `token${' '.repeat(16_384)}x` })).toEqual({ 'app.note': `token${' '.repeat(16_384)}x` });
  });

  it('leaves a clean span untouched (same object), so the common case costs no copy', () => {
    const span = asReadable(new FakeSpan('POST /partner/agents/status', { 'url.path': statusPath, 'http.route': statusPath }));
    expect(scrubSpan(span)).toBe(span);
  });

  it('scrubs event attributes, the span name and the status message, and keeps the span usable', () => {
    const span = new FakeSpan(
      `GET /partner/x?api_key=${key}`,
      { 'url.path': '/partner/x' },
      [{ name: 'exception', attributes: { 'exception.message': `bad header x-api-key: ${key}` }, time: [1, 0] }],
      { code: 2, message: `token=${key}` },
    );
    const scrubbed = scrubSpan(asReadable(span));
    expect(scrubbed.name).toBe(redacted);
    expect(scrubbed.events[0]!.attributes).toEqual({ 'exception.message': redacted });
    expect(scrubbed.status).toEqual({ code: 2, message: redacted });
    expect(scrubbed.spanContext()).toBe(spanContext);
    expect(scrubbed.duration).toEqual([0, 1000]);
    expect(span.name).toContain(key); // the original is not modified
  });

  it('wraps an exporter so that only scrubbed spans reach it', async () => {
    const exported: ReadableSpan[] = [];
    const inner: SpanExporter = {
      export: (spans, done) => {
        exported.push(...spans);
        done({ code: 0 });
      },
      shutdown: async () => undefined,
    };
    const exporter = scrubbingExporter(inner);
    const result = await new Promise((resolve) =>
      exporter.export([asReadable(new FakeSpan('s', { 'url.query': `api_key=${key}` }))], resolve),
    );
    expect(result).toEqual({ code: 0 });
    expect(exported.map((span) => span.attributes['url.query'])).toEqual([redacted]);
    await expect(exporter.forceFlush!()).resolves.toBeUndefined();
  });
});

describe('trace context: injected towards dependencies, never taken from a partner', () => {
  const setter = {
    set: (carrier: Record<string, string>, name: string, value: string) => {
      carrier[name] = value;
    },
  };

  it('injects a W3C traceparent for the active span, and nothing else', () => {
    const carrier: Record<string, string> = {};
    egressOnlyTraceContext.inject(trace.setSpanContext(ROOT_CONTEXT, spanContext), carrier, setter);
    expect(carrier).toEqual({ traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' });
    const unsampled: Record<string, string> = {};
    egressOnlyTraceContext.inject(trace.setSpanContext(ROOT_CONTEXT, { ...spanContext, traceFlags: TraceFlags.NONE }), unsampled, setter);
    expect(unsampled.traceparent).toMatch(/-00$/);
  });

  it('injects nothing without a valid span', () => {
    const carrier: Record<string, string> = {};
    egressOnlyTraceContext.inject(ROOT_CONTEXT, carrier, setter);
    expect(carrier).toEqual({});
  });

  it('extracts nothing from incoming headers: traceparent, tracestate and baggage are ignored', () => {
    const headers = {
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      tracestate: 'partner=1',
      baggage: `api_key=${key}`,
    };
    const context = egressOnlyTraceContext.extract(ROOT_CONTEXT, headers, {
      get: (c, k) => c[k as keyof typeof c],
      keys: (c) => Object.keys(c),
    });
    expect(context).toBe(ROOT_CONTEXT);
    expect(trace.getSpanContext(context)).toBeUndefined();
    expect(egressOnlyTraceContext.fields()).toEqual(['traceparent']);
  });
});
