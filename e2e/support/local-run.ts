import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * The names and ports of one local run (no BASE_URL): its own database, Redis key prefix, keys
 * file and ports, so two runs on one machine never meet. Chosen once, in the Playwright runner
 * process, and handed on through the environment: the launcher (webServer) and the workers
 * inherit it, and when a worker loads the config again it finds them set and keeps them.
 */
export interface LocalRun {
  runId: string;
  baseUrl: string;
  port: number;
  metricsPort: number;
  simulatorPort: number;
  databaseAdminUrl: string;
  databaseUrl: string;
  redisUrl: string;
  redisKeyPrefix: string;
  simulatorUrl: string;
  keysFile: string;
}

async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export async function prepareLocalRun(env: NodeJS.ProcessEnv = process.env): Promise<LocalRun> {
  if (!env.E2E_LOCAL_RUN_ID) {
    const runId = `${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
    const [port, metricsPort, simulatorPort] = [await freePort(), await freePort(), await freePort()];
    // The machine's PostgreSQL and Redis, as for `npm test` (overridable).
    const databaseAdminUrl = env.E2E_DATABASE_ADMIN_URL?.trim() || 'postgres://postgres@127.0.0.1:5432/postgres';
    const databaseUrl = new URL(databaseAdminUrl);
    databaseUrl.pathname = `/pas_e2e_${runId}`;
    Object.assign(env, {
      E2E_LOCAL_RUN_ID: runId,
      E2E_LOCAL_PORT: String(port),
      E2E_LOCAL_METRICS_PORT: String(metricsPort),
      E2E_LOCAL_SIMULATOR_PORT: String(simulatorPort),
      E2E_DATABASE_ADMIN_URL: databaseAdminUrl,
      E2E_DATABASE_URL: databaseUrl.toString(),
      E2E_REDIS_URL: env.E2E_REDIS_URL?.trim() || 'redis://127.0.0.1:6379',
      E2E_REDIS_KEY_PREFIX: `pas-e2e:${runId}:`,
      E2E_SIMULATOR_URL: `http://127.0.0.1:${simulatorPort}`,
      E2E_PARTNER_KEYS_FILE: join(tmpdir(), `pas-e2e-${runId}`, 'partner-keys.json'),
      E2E_VIA_INGRESS: '0',
    });
    // Left over from a cluster session in the same shell, these would point the seeding elsewhere.
    delete env.E2E_PARTNER_KEYS_SECRET;
  }
  const port = Number(env.E2E_LOCAL_PORT);
  return {
    runId: env.E2E_LOCAL_RUN_ID!,
    baseUrl: `http://127.0.0.1:${port}`,
    port,
    metricsPort: Number(env.E2E_LOCAL_METRICS_PORT),
    simulatorPort: Number(env.E2E_LOCAL_SIMULATOR_PORT),
    databaseAdminUrl: env.E2E_DATABASE_ADMIN_URL!,
    databaseUrl: env.E2E_DATABASE_URL!,
    redisUrl: env.E2E_REDIS_URL!,
    redisKeyPrefix: env.E2E_REDIS_KEY_PREFIX!,
    simulatorUrl: env.E2E_SIMULATOR_URL!,
    keysFile: env.E2E_PARTNER_KEYS_FILE!,
  };
}
