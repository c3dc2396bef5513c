import { isSpanContextValid, trace } from '@opentelemetry/api';
import { type DestinationStream, type Logger, pino } from 'pino';
import { redactKnownKeys } from './key-finder.js';

interface RequestLike {
  method?: string;
  url?: string;
  id?: unknown;
  routeOptions?: { url?: string };
}

/**
 * A request as a log field: method, path and route only. Never the query string (a key pasted into
 * a URL by mistake would land in every line) and never a header.
 */
function serializeRequest(request: RequestLike) {
  return {
    method: request.method,
    path: (request.url ?? '').split('?', 1)[0],
    ...(request.routeOptions?.url ? { route: request.routeOptions.url } : {}),
  };
}

/**
 * Errors as pino serializes them, minus what Node attaches to a parse error of a malformed request:
 * `rawPacket` holds the bytes received so far (headers, x-api-key included) and `bytesParsed` says
 * how far they go. Neither is written at any level.
 */
function serializeError(error: unknown): unknown {
  const serialized: unknown = pino.stdSerializers.err(error as Error);
  if (!serialized || typeof serialized !== 'object' || !('rawPacket' in serialized || 'bytesParsed' in serialized)) return serialized;
  const { rawPacket: _rawPacket, bytesParsed: _bytesParsed, ...rest } = serialized as Record<string, unknown>;
  return rest;
}

/**
 * JSON logs (pino). Every line carries the active trace and span ids, so a log line leads to its
 * trace. Request and error serializers drop what could carry a credential (query strings, raw
 * request bytes); the redaction paths remove header-shaped fields as a second line of defence, for
 * any code that logs headers: no code here logs a key.
 */
export function createLogger(level: string, output: DestinationStream | number = 1): Logger {
  // A file descriptor (standard output by default) is written in chunks; a stream as it is.
  const chunked = typeof output === 'number' ? chunkedDestination(output) : undefined;
  return pino(
    {
      level,
      base: { service: 'partner-agent-status' },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      serializers: { req: serializeRequest, err: serializeError, error: serializeError },
      redact: {
        paths: [
          'req.headers["x-api-key"]',
          'req.headers.authorization',
          'req.headers.cookie',
          'headers["x-api-key"]',
          'headers.authorization',
          'headers.cookie',
          'rawPacket',
          'err.rawPacket',
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
      hooks: {
        // Warnings and errors are written out at once, with whatever is buffered before them.
        logMethod(args, method, levelValue) {
          method.apply(this, args);
          if (levelValue >= warnLevel) chunked?.flush();
        },
        // The last line of defence: a partner key, wherever it came from, never reaches a line.
        streamWrite: redactKnownKeys,
      },
    },
    chunked?.stream ?? (output as DestinationStream),
  );
}

const warnLevel = pino.levels.values.warn ?? 40;

/**
 * A file descriptor (standard output), written in chunks instead of one write per line: one
 * access line per request would make one system call per request, a share of the service's CPU
 * under load that `npm run bench` shows. Lines wait at most 250 ms (or until 8 KiB have gathered); warn and
 * error lines are written at once (the hook above); pino writes what is left when the process
 * exits, close-with-grace's exit included. A SIGKILL can lose the last quarter second of info lines.
 */
function chunkedDestination(fd: number) {
  const stream = pino.destination({ dest: fd, sync: false, minLength: 8 * 1024 });
  const flush = () => {
    try {
      stream.flush();
    } catch {
      // Ended (the process is exiting): pino has written the rest.
    }
  };
  setInterval(flush, 250).unref();
  return { stream, flush };
}
