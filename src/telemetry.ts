// OpenTelemetry preload: `node --import ./dist/telemetry.js dist/main.js`. It runs before the app's
// module graph loads, because pg, ioredis and the AWS SDK are patched as they are loaded.
//
// Tracing off (OTEL_SDK_DISABLED=true) loads nothing but @opentelemetry/api, which the app loads
// anyway: every other import sits inside startTracing, import-in-the-middle's loader hook included.
// Tracing on loads only the five instrumentations the service uses (http for the server; undici for
// the spend call; pg; ioredis; aws-sdk), never the auto-instrumentations bundle
// (dozens of packages), and no Fastify instrumentation: its span per request (and its hooks')
// told nothing the server span does not once the app names that span by route.
// test/integration/tracing.process.test.ts fails if the spans of pg, ioredis or the spend call go missing.
//
// What a trace may hold is decided here, in three layers:
// 1. The instrumentations record no headers, and the server span's `url.query` is replaced.
// 2. Trace context is ours: an incoming `traceparent`, `tracestate` or `baggage` is never extracted
//    (see egressOnlyTraceContext), and we send only `traceparent` to our dependencies.
// 3. Last line: every span passes through scrubSpan before the exporter, which overwrites any
//    string that looks like a credential (api_key=…, x-api-key: …, bearer …) or holds a loaded
//    partner key anywhere in it (src/observability/key-finder.ts: checked against the key set by digest) in
//    attribute values, event attributes, the span name and the status message, and drops the user
//    agent (a header partners fill as they like). A request no route matches is exported by the
//    not-found route's template, never by its path (src/http/app.ts).

import {
  type Attributes,
  type AttributeValue,
  type Context,
  isSpanContextValid,
  type TextMapPropagator,
  type TextMapSetter,
  trace,
} from '@opentelemetry/api';
import type { NodeSDKConfiguration } from '@opentelemetry/sdk-node';
import { holdsKnownKey } from './observability/key-finder.js';
import { registerTelemetry } from './observability/telemetry-handle.js';

type SpanExporter = NodeSDKConfiguration['traceExporter'];
type ReadableSpan = Parameters<SpanExporter['export']>[0][number];

export const redacted = 'REDACTED';

/**
 * A credential's name followed by its value: `api_key=…`, `x-api-key: …`, `token=…`, `Bearer …`;
 * or a partner key in the issued format (`pas_` and 38 Base62 characters), wherever it stands.
 * Written so that it cannot backtrack over a run twice (one `\s*`, then the quote with its own
 * spaces): its time is linear in the length of the string (test/unit/telemetry.test.ts).
 */
const credentialInText =
  /(?:api[-_]?key|access[-_]?token|token|secret|password|passwd|authorization|cookie)\s*(?:["']\s*)?[=:]|\bbearer\s+\S|pas_[0-9a-z]{38}/i;
/** Attribute names (their last segment) whose value is a credential whatever it looks like. */
const credentialName = /^(?:x-)?(?:api[-_]?key|authorization|cookie|set-cookie|(?:access[-_]?)?token|secret|password)$/i;

/** `compute` remembered for up to `max` inputs: for the few strings every span repeats. */
function remembered<T>(max: number, compute: (input: string) => T): (input: string) => T {
  const known = new Map<string, T>();
  return (input) => {
    if (known.has(input)) return known.get(input) as T;
    const value = compute(input);
    if (known.size < max) known.set(input, value);
    return value;
  };
}

/** Whether an attribute name is a credential's; spans repeat a few dozen names, so each is tested once. */
const namesCredential = remembered(1_000, (key) => credentialName.test(key.slice(key.lastIndexOf('.') + 1)));

/** Whether a string is a credential by its shape, or holds a partner key of the loaded set. */
const leaks = (text: string) => credentialInText.test(text) || holdsKnownKey(text);

function scrubValue(key: string, value: AttributeValue | undefined): AttributeValue | undefined {
  if (typeof value === 'string') return namesCredential(key) || leaks(value) ? redacted : value;
  if (!Array.isArray(value) || !value.some((item) => typeof item === 'string')) return value;
  return namesCredential(key) || value.some((item) => typeof item === 'string' && leaks(item)) ? redacted : value;
}

/** Attributes never exported: the user agent is whatever a partner's client sends (a key, once). */
const droppedAttributes = new Set(['user_agent.original']);

/** The same attributes with every credential-like value overwritten; the same object when nothing changed. */
export function scrubAttributes(attributes: Attributes): Attributes {
  let scrubbed: Attributes | undefined;
  for (const key of Object.keys(attributes)) {
    if (droppedAttributes.has(key)) {
      scrubbed ??= { ...attributes };
      delete scrubbed[key];
      continue;
    }
    const value = attributes[key];
    const clean = scrubValue(key, value);
    if (clean === value) continue;
    scrubbed ??= { ...attributes };
    scrubbed[key] = clean;
  }
  return scrubbed ?? attributes;
}

/** The span as exported: itself when clean, else a view of it with the credential-like values overwritten. */
export function scrubSpan(span: ReadableSpan): ReadableSpan {
  const attributes = scrubAttributes(span.attributes);
  let eventsChanged = false;
  // Most spans have no events: no new array for them.
  const events =
    span.events.length === 0
      ? span.events
      : span.events.map((event) => {
          const eventAttributes = event.attributes && scrubAttributes(event.attributes);
          if (eventAttributes === event.attributes) return event;
          eventsChanged = true;
          return { ...event, attributes: eventAttributes };
        });
  const nameLeaks = leaks(span.name);
  const statusLeaks = span.status.message !== undefined && leaks(span.status.message);
  if (attributes === span.attributes && !eventsChanged && !nameLeaks && !statusLeaks) return span;
  // A view, not a copy: spanContext() and the getters keep working through the prototype.
  return Object.create(span, {
    attributes: { value: attributes },
    events: { value: eventsChanged ? events : span.events },
    name: { value: nameLeaks ? redacted : span.name },
    status: { value: statusLeaks ? { ...span.status, message: redacted } : span.status },
  }) as ReadableSpan;
}

/** Wraps the OTLP exporter so that nothing leaves the process unscrubbed. */
export function scrubbingExporter(inner: SpanExporter): SpanExporter {
  return {
    export: (spans, done) => inner.export(spans.map(scrubSpan), done),
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush?.() ?? Promise.resolve(),
  };
}

/**
 * W3C trace context towards our dependencies only. The service faces the internet, so every header
 * a partner sends is partner-controlled: a `traceparent` with the sampled flag set on every request
 * would defeat the sampler (the chart's parentbased_traceidratio keeps a parent's decision) and turn
 * tracing into a cost a partner chooses; a chosen trace id could collide with or pollute other
 * traces; and `baggage` would be forwarded to spend management. So nothing is extracted: each
 * request starts its own trace at our edge, and the request id (`x-request-id`) is what links a
 * partner's call to our logs and traces. Outgoing calls carry our `traceparent` (no `tracestate`,
 * no `baggage`). A replica that wants to relate later work to a request (the durable-disable
 * worker) records the traceparent and adds it as a span link, not as a parent.
 */
export const egressOnlyTraceContext: TextMapPropagator = {
  inject(context: Context, carrier: unknown, setter: TextMapSetter) {
    const spanContext = trace.getSpanContext(context);
    if (!spanContext || !isSpanContextValid(spanContext)) return;
    const flags = (spanContext.traceFlags & 0xff).toString(16).padStart(2, '0');
    setter.set(carrier, 'traceparent', `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`);
  },
  extract: (context: Context) => context,
  fields: () => ['traceparent'],
};

const unobserved = new Set(['/livez', '/readyz', '/metrics']);

/** SQL on one line; the service has a handful of statements, so each is compacted once. */
const compactSql = remembered(100, (text) => text.replace(/\s+/g, ' ').trim());
const pathOf = (url: string | undefined) => (url ?? '').split('?', 1)[0] ?? '';

async function startTracing(): Promise<void> {
  // Defaults for this service; each is the standard variable, so the environment can override it.
  process.env.OTEL_SERVICE_NAME ??= 'partner-agent-status';
  // Metrics go to Prometheus (prom-client) and logs to stdout (pino): export only traces.
  process.env.OTEL_METRICS_EXPORTER ??= 'none';
  process.env.OTEL_LOGS_EXPORTER ??= 'none';
  // BatchSpanProcessor, sized on purpose (sdk-node builds it from these; the SDK's defaults are
  // queue 2048, batch 512, delay 5000 ms, export timeout 30000 ms). An enable makes a handful of
  // spans, a disable a few more per batch of campaigns: the queue bounds the memory spans take;
  // beyond it spans are dropped (and counted by the SDK), never queued without bound.
  // A 1 s delay keeps spans in memory briefly and exports in small, steady batches;
  // a 10 s export timeout stays inside SHUTDOWN_TIMEOUT_MS, so the final flush cannot hold the exit.
  process.env.OTEL_BSP_MAX_QUEUE_SIZE ??= '2048';
  process.env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE ??= '512';
  process.env.OTEL_BSP_SCHEDULE_DELAY ??= '1000';
  process.env.OTEL_BSP_EXPORT_TIMEOUT ??= '10000';
  // Partner-controlled strings (user agent: headers go up to 16 KiB) never make a span large.
  process.env.OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT ??= '1024';
  // The sampler comes from OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG (sdk-node reads them; the
  // SDK default is parentbased_always_on). The Helm chart sets parentbased_traceidratio with a
  // ratio: since no parent is ever extracted (egressOnlyTraceContext), that is a ratio of requests.

  // Spans leave over OTLP only (OTEL_TRACES_EXPORTER is read just for `none`, which turns tracing
  // off like OTEL_SDK_DISABLED). Only the exporter of the protocol in use is loaded; each reads
  // OTEL_EXPORTER_OTLP_* (endpoint, headers, time-out) itself.
  const protocol =
    (process.env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? process.env.OTEL_EXPORTER_OTLP_PROTOCOL ?? '').trim() || 'http/protobuf';
  const loadExporter = async (): Promise<SpanExporter> => {
    if (protocol === 'grpc') return new (await import('@opentelemetry/exporter-trace-otlp-grpc')).OTLPTraceExporter();
    if (protocol === 'http/json') return new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter();
    return new (await import('@opentelemetry/exporter-trace-otlp-proto')).OTLPTraceExporter();
  };

  const [
    { NodeSDK },
    { HttpInstrumentation },
    { UndiciInstrumentation },
    { PgInstrumentation },
    { IORedisInstrumentation },
    { AwsInstrumentation },
    exporter,
  ] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/instrumentation-http'),
    import('@opentelemetry/instrumentation-undici'),
    import('@opentelemetry/instrumentation-pg'),
    import('@opentelemetry/instrumentation-ioredis'),
    import('@opentelemetry/instrumentation-aws-sdk'),
    loadExporter(),
  ]);

  const instrumentations = [
    new HttpInstrumentation({
      // Probes and scrapes would drown the traces of partner requests.
      ignoreIncomingRequestHook: (request) => unobserved.has(pathOf(request.url)),
      // Never record request or response headers (x-api-key, authorization, cookie, baggage).
      headersToSpanAttributes: { client: { requestHeaders: [], responseHeaders: [] }, server: { requestHeaders: [], responseHeaders: [] } },
      // The API takes no query parameters: a query is a mistake (a key pasted into the URL), and
      // the instrumentation would export it, redacting only signature-style names.
      startIncomingSpanHook: (request) => ((request.url ?? '').includes('?') ? { 'url.query': redacted } : {}),
      // Outgoing calls over node:http are the exporter's own (not traced anyway) and the AWS SDK's
      // (under its own span, see below): nothing to wrap.
      disableOutgoingRequestInstrumentation: true,
    }),
    // The spend-management call (undici): a client span, and our traceparent on the request.
    new UndiciInstrumentation({ requireParentforSpans: true }),
    // Queries and commands outside a request (pool warm-up, readiness pings) are not traced.
    // No span for taking a pooled connection (the pool checks one out for every query): it would
    // double the spans of every request and tells nothing the query span does not.
    new PgInstrumentation({
      requireParentSpan: true,
      enhancedDatabaseReporting: false,
      ignoreConnectSpans: true,
      // The statement as one line: the indentation of the source is a third of its text, and of
      // the bytes every query span costs to serialize, export and store.
      requestHook: (span, { query }) => span.setAttribute('db.query.text', compactSql(query.text)),
    }),
    new IORedisInstrumentation({
      requireParentSpan: true,
      // The command, the script and the first key: a batch's mark has 100 keys, which would fill
      // the attribute to its length limit on every disable span.
      dbStatementSerializer: (command, args) => [command, ...args.slice(0, 3)].join(' ') + (args.length > 3 ? ' …' : ''),
    }),
    // One span per Secrets Manager call, without the HTTP client span under it.
    new AwsInstrumentation({ suppressInternalInstrumentation: true }),
  ];

  // pg, ioredis and the AWS SDK are CommonJS and patched through require-in-the-middle. The ESM
  // loader hook is installed for their names only (on Node 24 as synchronous in-thread hooks), so
  // it does not wrap every module of the app; without `include` it does, and the process grows.
  const hooked = instrumentations.flatMap((instrumentation) => instrumentation.getModuleDefinitions().map((definition) => definition.name));
  const hooks = await import('import-in-the-middle/register-hooks.mjs');
  if (hooks.supportsSyncHooks()) hooks.register({ include: hooked });
  else (await import('node:module')).register('import-in-the-middle/hook.mjs', import.meta.url, { data: { include: hooked } });

  const sdk = new NodeSDK({
    instrumentations,
    textMapPropagator: egressOnlyTraceContext,
    // sdk-node puts it behind a BatchSpanProcessor configured by the OTEL_BSP_* variables above.
    traceExporter: scrubbingExporter(exporter),
  });
  sdk.start();
  registerTelemetry({ shutdown: () => sdk.shutdown() });
}

const tracingOff =
  process.env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true' || process.env.OTEL_TRACES_EXPORTER?.trim().toLowerCase() === 'none';
if (!tracingOff) await startTracing();
