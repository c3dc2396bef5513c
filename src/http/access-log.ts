import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Metrics } from '../observability/metrics.js';
import type { HttpApp } from './route-table.js';

/**
 * One access line and one latency sample per request (the onResponse hook), at debug for probes,
 * error for 5xx, info otherwise, with what the request did (request.audit, never the key). A
 * flood of bad keys must not become a flood of log lines: 401s are logged at most once a second
 * (metrics count every one), and the next line says how many were left out.
 */
export function installAccessLog(app: HttpApp, metrics: Metrics): void {
  let last401Log = 0;
  let suppressed401 = 0;
  const suppressedAuthLines = metrics.logLinesSuppressed.labels({ reason: 'auth_failure' });
  // One histogram child per (method, route, status): prom-client then skips hashing the labels.
  const durations = new Map<string, { observe: (value: number) => void }>();
  app.addHook('onResponse', (request, reply, done) => {
    logResponse(request, reply);
    done();
  });
  function logResponse(request: FastifyRequest, reply: FastifyReply): void {
    const route = request.routeOptions.url ?? 'unmatched';
    const statusCode = reply.statusCode;
    const series = `${request.method} ${route} ${statusCode}`;
    let duration = durations.get(series);
    if (!duration) {
      duration = metrics.httpRequestDuration.labels({ method: request.method, route, status_code: String(statusCode) });
      durations.set(series, duration);
    }
    duration.observe(reply.elapsedTime / 1000);
    let extra: { suppressedSinceLastLine?: number } = {};
    if (statusCode === 401) {
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
    request.log[level](
      { method: request.method, route, statusCode, durationMs: Math.round(reply.elapsedTime * 10) / 10, ...request.audit, ...extra },
      'request completed',
    );
  }
}
