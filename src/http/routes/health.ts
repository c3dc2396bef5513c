import type { FastifyPluginAsync } from 'fastify';

export interface HealthDeps {
  /** true when the service can serve: keys loaded, database reachable, not draining. */
  isReady: () => Promise<boolean>;
}

/** Kubernetes probes. Liveness says only that the event loop answers; readiness checks the rest. */
export const healthRoutes: FastifyPluginAsync<HealthDeps> = async (app, { isReady }) => {
  app.get('/livez', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_request, reply) => {
    if (await isReady()) return { status: 'ready' };
    return reply.code(503).send({ status: 'not ready' });
  });
};
