import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify';
import type { Metrics } from '../observability/metrics.js';
import type { HttpApp } from './route-table.js';

/** What a request did, as its access line says it. */
interface Line {
  method: string;
  route: string;
  statusCode: number;
  durationMs: number;
  fields: Record<string, unknown> | undefined;
}

/** The status code of the line and the latency sample of a request whose client left before its answer (nginx's). */
const clientGoneStatus = 499;
/** Answers from which a client leaving while they are written is watched for. */
const largeAnswerBytes = 64 * 1024;

export interface AccessLog {
  /** An answer Fastify sent outside the request lifecycle (frameworkErrors: bad URL encoding, ...): no hook runs for it. */
  outsideHooks(request: FastifyRequest, reply: FastifyReply, startedAt: number): void;
  /** An answer the HTTP server wrote itself, with no request object (CONNECT). */
  serverAnswer(log: FastifyBaseLogger, method: string, statusCode: number, requestId: string): void;
  /** The latency sample of a request Node could not parse (its line is `malformed request rejected`). */
  unparsed(statusCode: number): void;
}

/**
 * One access line and one latency sample per request that reached the service, whatever its end:
 * - answered: the onResponse hook, when the answer has been written;
 * - the client left before its answer: the onSend hook, once the work is over and the answer it
 *   would have had is known (a disable whose client hung up still pauses everything): status 499,
 *   outcome `client_gone`, and what the work did in `workOutcome` and `unsentStatusCode`;
 * - refused before the lifecycle (bad URL encoding, CONNECT): through `outsideHooks` and
 *   `serverAnswer`.
 * Lines are at debug for probes, error for 5xx, info otherwise, with what the request did
 * (request.audit, never the key). A flood of bad keys must not become a flood of log lines: 401s
 * (and bad keys shed with a 503) are logged at most once a second (metrics count every one), and the next line says how many were
 * left out.
 */
export function installAccessLog(app: HttpApp, metrics: Metrics): AccessLog {
  let last401Log = 0;
  let suppressed401 = 0;
  const suppressedAuthLines = metrics.logLinesSuppressed.labels({ reason: 'auth_failure' });
  // One histogram child per (method, route, status): prom-client then skips hashing the labels.
  const durations = new Map<string, { observe: (value: number) => void }>();

  /** The line of a request whose client left before its answer: written when its work is over. */
  function clientGone(request: FastifyRequest, reply: FastifyReply): void {
    const audit = request.audit;
    const fields = { ...audit, outcome: 'client_gone', unsentStatusCode: reply.statusCode, workOutcome: audit.outcome };
    audit.outcome = 'client_gone';
    write(request.log, {
      method: request.method,
      route: routeOf(request),
      statusCode: clientGoneStatus,
      durationMs: reply.elapsedTime,
      fields,
    });
  }
  app.addHook('onSend', (request, reply, payload, done) => {
    const socket = request.raw.socket;
    // The client is gone: no answer can be written, so onResponse will not run. The work is over.
    // (Strict comparisons: an injected request's socket is a stand-in without these properties.)
    if (socket && (socket.destroyed === true || socket.writable === false) && request.audit) clientGone(request, reply);
    // A large answer (the reference page's script, the OpenAPI document) takes a while to write: a
    // client that leaves meanwhile gets its line when the connection closes ('close' without 'finish').
    else if ((typeof payload === 'string' || Buffer.isBuffer(payload)) && payload.length > largeAnswerBytes && request.audit) {
      reply.raw.once('close', () => {
        if (!reply.raw.writableFinished) clientGone(request, reply);
      });
    }
    done(null, payload);
  });
  app.addHook('onResponse', (request, reply, done) => {
    if (request.audit?.outcome !== 'client_gone') {
      write(request.log, {
        method: request.method,
        route: routeOf(request),
        statusCode: reply.statusCode,
        durationMs: reply.elapsedTime,
        fields: request.audit,
      });
    }
    done();
  });

  function routeOf(request: FastifyRequest): string {
    return request.routeOptions.url ?? 'unmatched';
  }

  function sample(method: string, route: string, statusCode: number, durationMs: number): void {
    const series = `${method} ${route} ${statusCode}`;
    let duration = durations.get(series);
    if (!duration) {
      duration = metrics.httpRequestDuration.labels({ method, route, status_code: String(statusCode) });
      durations.set(series, duration);
    }
    duration.observe(durationMs / 1000);
  }

  function write(log: FastifyBaseLogger, { method, route, statusCode, durationMs, fields }: Line): void {
    sample(method, route, statusCode, durationMs);
    let extra: { suppressedSinceLastLine?: number } = {};
    // Bad keys, answered 401 or shed (a held 503): a flood of them is a flood of lines otherwise.
    if (statusCode === 401 || fields?.outcome === 'unauthenticated_shed') {
      const now = Date.now();
      if (now - last401Log < 1_000) {
        suppressed401 += 1;
        suppressedAuthLines.inc();
        return;
      }
      last401Log = now;
      if (suppressed401 > 0) extra = { suppressedSinceLastLine: suppressed401 };
      suppressed401 = 0;
    }
    const probe = route === '/livez' || route === '/readyz';
    const level = probe ? 'debug' : statusCode >= 500 ? 'error' : 'info';
    log[level]({ method, route, statusCode, durationMs: Math.round(durationMs * 10) / 10, ...fields, ...extra }, 'request completed');
  }

  return {
    outsideHooks(request, reply, startedAt) {
      write(request.log, {
        method: request.method,
        route: 'unmatched',
        statusCode: reply.statusCode,
        durationMs: performance.now() - startedAt,
        fields: undefined,
      });
    },
    unparsed(statusCode) {
      sample('unparsed', 'unmatched', statusCode, 0);
    },
    serverAnswer(log, method, statusCode, requestId) {
      write(log.child({ requestId }), { method, route: 'unmatched', statusCode, durationMs: 0, fields: undefined });
    },
  };
}
