import { once } from 'node:events';
import { createServer } from 'node:http';
import { waitFor } from './wait.js';

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  scope: string;
}

type AnyValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };

/**
 * A minimal OTLP/HTTP trace receiver (JSON encoding), so a test sees exactly what the SDK exports:
 * the spans as parsed here, and every request body as received (events, status and resource too).
 */
export async function startOtlpReceiver() {
  const spans: ReceivedSpan[] = [];
  const bodies: string[] = [];
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk) => chunks.push(chunk));
    request.on('end', () => {
      if (request.url === '/v1/traces') {
        const text = Buffer.concat(chunks).toString();
        bodies.push(text);
        const body = JSON.parse(text || '{}');
        for (const resourceSpans of body.resourceSpans ?? []) {
          for (const scopeSpans of resourceSpans.scopeSpans ?? []) {
            for (const span of scopeSpans.spans ?? []) {
              spans.push({
                traceId: span.traceId,
                spanId: span.spanId,
                parentSpanId: span.parentSpanId || undefined,
                name: span.name,
                kind: span.kind,
                scope: scopeSpans.scope?.name ?? '',
                attributes: Object.fromEntries(
                  (span.attributes ?? []).map((a: { key: string; value: AnyValue }) => [
                    a.key,
                    a.value.stringValue ?? a.value.intValue ?? a.value.boolValue ?? a.value.doubleValue,
                  ]),
                ),
              });
            }
          }
        }
      }
      response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return {
    endpoint: `http://127.0.0.1:${port}`,
    spans,
    bodies,
    async waitFor(predicate: (spans: ReceivedSpan[]) => boolean, timeoutMs = 15_000): Promise<void> {
      await waitFor(() => predicate(spans), {
        timeoutMs,
        intervalMs: 100,
        failure: () => `spans not received in time; got: ${spans.map((s) => s.name).join(', ')}`,
      });
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
