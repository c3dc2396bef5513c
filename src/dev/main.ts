// `npm run dev`: the whole service on one machine with no external dependency: PostgreSQL embedded
// (PGlite behind its socket server), an in-process key-value store, the spend-management
// simulator, seeded demo data and a demo key made at start. Not for production: PGlite is one
// PostgreSQL session shared by every connection, so the pool is kept to one connection here.
//
// Everything runs in this one process. Each resource is released in reverse order of its start,
// on SIGINT and SIGTERM and on a failed start alike, so nothing is left listening or on disk.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import pg from 'pg';
import { issueKey } from '../auth/issued-key.js';
import { loadConfig } from '../config.js';
import { migrate } from '../db/migrate.js';
import { partnerPath, partnerRoutes } from '../http/paths.js';
import { createLogger } from '../observability/logger.js';
import { Resources } from '../resources.js';
import { createService } from '../service.js';
import { createSpendSimulator } from '../spend-simulator/simulator.js';
import { printEvents } from './event-log.js';
import { createInMemoryCampaignState } from './in-memory-campaign-state.js';
import { type DemoData, seedDemo } from './seed.js';

const port = Number(process.env.PORT ?? 8080);
const metricsPort = Number(process.env.METRICS_PORT ?? 9464);
const databasePort = Number(process.env.DEV_DATABASE_PORT ?? 54329);
const simulatorPort = Number(process.env.DEV_SIMULATOR_PORT ?? 8081);

/** What has been started, newest last; released newest first. */
const resources = new Resources();
const releaseAll = () => resources.releaseAll((name, reason) => process.stderr.write(`npm run dev: could not stop ${name}: ${reason}\n`));

async function start() {
  const db = await PGlite.create();
  resources.own('PGlite', db, (pglite) => pglite.close());
  const databaseServer = new PGLiteSocketServer({ db, host: '127.0.0.1', port: databasePort, maxConnections: 4 });
  await databaseServer.start();
  resources.own('the PGlite socket server', databaseServer, (server) => server.stop());
  const databaseUrl = `postgres://postgres@127.0.0.1:${databasePort}/postgres?sslmode=disable`;
  await migrate(databaseUrl);
  const demo = await withClient(databaseUrl, seedDemo);

  const simulator = createSpendSimulator();
  await simulator.listen({ port: simulatorPort, host: '127.0.0.1' });
  resources.own('the simulator', simulator, (sim) => sim.close());

  const keysDir = mkdtempSync(join(tmpdir(), 'partner-agent-status-dev-'));
  resources.own('the key directory', keysDir, (dir) => rmSync(dir, { recursive: true, force: true }));
  const demoKey = issueKey();
  writeFileSync(
    join(keysDir, 'partner-keys.json'),
    JSON.stringify({ 'partner-keys': { [demoKey]: { networkId: demo.networkId, name: 'demo-partner' } } }),
  );

  const config = loadConfig({
    ...process.env,
    PORT: String(port),
    METRICS_PORT: String(metricsPort),
    HOST: process.env.HOST ?? '127.0.0.1',
    DATABASE_URL: databaseUrl,
    DATABASE_POOL_SIZE: '1',
    REDIS_URL: 'redis://in-process.invalid:6379',
    // No Redis here to count requests in: the rate limit is off unless asked for.
    RATE_LIMIT_MAX: process.env.RATE_LIMIT_MAX ?? '0',
    SPEND_MANAGEMENT_URL: `http://127.0.0.1:${simulatorPort}`,
    PARTNER_KEYS_FILE: join(keysDir, 'partner-keys.json'),
    PARTNER_KEYS_SECRET_ID: '',
    DRAIN_DELAY_MS: '0',
  });
  const logger = createLogger(config.logLevel);
  const service = await createService(config, { logger, campaignState: createInMemoryCampaignState() });
  resources.own('the service', service, (svc) => svc.close());
  await service.app.listen({ port: config.port, host: config.host });
  await service.metricsServer.listen({ port: config.metricsPort, host: config.host });
  resources.own(
    'the event log',
    printEvents(db, (line) => process.stdout.write(line)),
    (stopPrinting) => stopPrinting(),
  );
  printWelcome(`http://127.0.0.1:${config.port}`, `http://127.0.0.1:${config.metricsPort}`, demoKey, demo);
}

async function withClient<T>(url: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

function printWelcome(base: string, metrics: string, demoKey: string, demo: DemoData) {
  const simulator = `http://127.0.0.1:${simulatorPort}`;
  process.stdout.write(`
partner-agent-status is running (development mode: embedded PostgreSQL, in-process key-value store, simulator).

  API            ${base}${partnerPath(partnerRoutes.agentStatus)}
  OpenAPI        ${base}${partnerPath(partnerRoutes.openApi)}
  Health         ${base}/livez  ${base}/readyz
  Metrics        ${metrics}/metrics
  Simulator      ${simulator}/_simulator/state

  Demo API key   ${demoKey}
  Demo network   ${demo.networkId}
  Demo agents    ${demo.agentId} (${demo.campaignCount} active campaigns), ${demo.otherAgentId}
  Other network  ${demo.foreignAgentId} (answers 404 to the demo key)

Disable the demo agent:

  curl -s -X POST ${base}${partnerPath(partnerRoutes.agentStatus)} -H 'content-type: application/json' -H 'x-api-key: ${demoKey}' -d '{"agentId":"${demo.agentId}","enabled":false}'

Enable it again (resumes nothing):

  curl -s -X POST ${base}${partnerPath(partnerRoutes.agentStatus)} -H 'content-type: application/json' -H 'x-api-key: ${demoKey}' -d '{"agentId":"${demo.agentId}","enabled":true}'

Make spend management fail (then "ok" to recover):

  curl -s -X PUT ${simulator}/_simulator/mode -H 'content-type: application/json' -d '{"mode":"fail"}'

Every event (docs/interfaces.md §14) is printed below as it is committed; it is the change row of
the embedded database's status history (or its disable_completions row, kept EVENTS_RETENTION_MS).

Stop with Ctrl-C (SIGINT) or SIGTERM.

`);
}

const starting = start();
let stopping = false;
let stopSignalAt = 0;

function stop(signal: NodeJS.Signals) {
  if (stopping) {
    // Ctrl-C reaches this process twice: from the terminal (the whole process group) and again
    // forwarded by npm. Only a signal sent later, while the release is still running, forces.
    if (Date.now() - stopSignalAt < 1_000) return;
    process.stderr.write(`npm run dev: ${signal} again, exiting at once\n`);
    process.exit(1);
  }
  stopping = true;
  stopSignalAt = Date.now();
  // A signal during the start waits for it to end, then releases whatever did start.
  void starting
    .catch(() => undefined)
    .then(releaseAll)
    .then((clean) => process.exit(clean ? 0 : 1));
}
process.on('SIGINT', stop);
process.on('SIGTERM', stop);

starting.catch(async (error: Error) => {
  if (stopping) return;
  process.stderr.write(`npm run dev could not start: ${error.message}\n`);
  await releaseAll();
  process.exit(1);
});
