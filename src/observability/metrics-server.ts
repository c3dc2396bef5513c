import Fastify from 'fastify';
import type { Metrics } from './metrics.js';

/**
 * Prometheus `/metrics` on its own port (METRICS_PORT), so the ingress can never route to it and a
 * scrape never queues behind partner traffic.
 */
export function createMetricsServer(metrics: Metrics) {
  const server = Fastify({ logger: false });
  server.get('/metrics', async (_request, reply) => {
    reply.type(metrics.registry.contentType);
    return metrics.registry.metrics();
  });
  return server;
}
