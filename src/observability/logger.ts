import { isSpanContextValid, trace } from '@opentelemetry/api';
import { pino, type DestinationStream, type Logger } from 'pino';

/**
 * JSON logs (pino). Every line carries the active trace and span ids, so a log line leads to its
 * trace. Header paths that could hold a credential are removed as a second line of defence: the
 * request serializer logs no headers at all, and no code logs a key.
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'partner-agent-status' },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: {
        paths: [
          'req.headers["x-api-key"]',
          'req.headers.authorization',
          'req.headers.cookie',
          'headers["x-api-key"]',
          'headers.authorization',
          'apiKey',
          'key',
          'token',
        ],
        remove: true,
      },
      mixin() {
        const context = trace.getActiveSpan()?.spanContext();
        return context && isSpanContextValid(context) ? { traceId: context.traceId, spanId: context.spanId } : {};
      },
    },
    destination,
  );
}
