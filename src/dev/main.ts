// `npm run dev`: the whole service on one machine with no external dependency: PostgreSQL embedded
// (PGlite behind its socket server), an in-process key-value store, the spend-management
// simulator, seeded demo data and a demo key made at start. Not for production: PGlite is one
// PostgreSQL session shared by every connection, so the pool is kept to one connection here.
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import pg from 'pg';
import { loadConfig } from '../config.js';
import { migrate } from '../db/migrate.js';
import { createLogger } from '../observability/logger.js';
import { createService } from '../service.js';
import { createSpendSimulator } from '../spend-simulator/simulator.js';
import { createInMemoryCampaignState } from './in-memory-campaign-state.js';

const port = Number(process.env.PORT ?? 8080);
const metricsPort = Number(process.env.METRICS_PORT ?? 9464);
const databasePort = Number(process.env.DEV_DATABASE_PORT ?? 54329);
const simulatorPort = Number(process.env.DEV_SIMULATOR_PORT ?? 8081);

const db = await PGlite.create();
const databaseServer = new PGLiteSocketServer({ db, host: '127.0.0.1', port: databasePort, maxConnections: 4 });
await databaseServer.start();
const databaseUrl = `postgres://postgres@127.0.0.1:${databasePort}/postgres?sslmode=disable`;
await migrate(databaseUrl);
const demo = await seed(databaseUrl);

const simulator = createSpendSimulator();
await simulator.listen({ port: simulatorPort, host: '127.0.0.1' });

const keysDir = mkdtempSync(join(tmpdir(), 'partner-agent-status-dev-'));
const demoKey = `pk_demo_${randomBytes(18).toString('base64url')}`;
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
  SPEND_MANAGEMENT_URL: `http://127.0.0.1:${simulatorPort}`,
  PARTNER_KEYS_FILE: join(keysDir, 'partner-keys.json'),
  PARTNER_KEYS_SECRET_ID: '',
  DRAIN_DELAY_MS: '0',
});
const logger = createLogger(config.logLevel);
const campaignState = createInMemoryCampaignState();
const service = await createService(config, { logger, campaignState });
await service.app.listen({ port: config.port, host: config.host });
await service.metricsServer.listen({ port: config.metricsPort, host: config.host });

const base = `http://127.0.0.1:${config.port}`;
process.stdout.write(`
partner-agent-status is running (development mode: embedded PostgreSQL, in-process key-value store, simulator).

  API            ${base}/partner/agents/status
  OpenAPI        ${base}/partner/openapi.json
  Health         ${base}/livez  ${base}/readyz
  Metrics        http://127.0.0.1:${config.metricsPort}/metrics
  Simulator      http://127.0.0.1:${simulatorPort}/_simulator/state

  Demo API key   ${demoKey}
  Demo network   ${demo.networkId}
  Demo agents    ${demo.agentId} (${demo.campaignCount} active campaigns), ${demo.otherAgentId}
  Other network  ${demo.foreignAgentId} (answers 404 to the demo key)

Disable the demo agent:

  curl -s -X POST ${base}/partner/agents/status -H 'content-type: application/json' -H 'x-api-key: ${demoKey}' -d '{"agentId":"${demo.agentId}","enabled":false}'

Enable it again (resumes nothing):

  curl -s -X POST ${base}/partner/agents/status -H 'content-type: application/json' -H 'x-api-key: ${demoKey}' -d '{"agentId":"${demo.agentId}","enabled":true}'

Make spend management fail (then "ok" to recover):

  curl -s -X PUT http://127.0.0.1:${simulatorPort}/_simulator/mode -H 'content-type: application/json' -d '{"mode":"fail"}'

`);

let stopping = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, async () => {
    if (stopping) process.exit(1);
    stopping = true;
    await service.close();
    await simulator.close();
    await databaseServer.stop();
    await db.close();
    rmSync(keysDir, { recursive: true, force: true });
    process.exit(0);
  });
}

async function seed(url: string) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const networkId = randomUUID();
    const otherNetworkId = randomUUID();
    const agentId = `us-east-1:${randomUUID()}`;
    const otherAgentId = `us-east-1:${randomUUID()}`;
    const foreignAgentId = `us-east-1:${randomUUID()}`;
    await client.query('INSERT INTO networks (network_id, require_agent_approval) VALUES ($1, true), ($2, false)', [networkId, otherNetworkId]);
    await client.query('INSERT INTO agents (agent_id, network_id) VALUES ($1, $3), ($2, $3), ($4, $5)', [agentId, otherAgentId, networkId, foreignAgentId, otherNetworkId]);
    const campaignCount = 12;
    for (let i = 0; i < campaignCount + 3; i++) {
      // 12 active and unpaused, one inactive, two already paused: a disable pauses 12.
      await client.query('INSERT INTO campaigns (campaign_id, agent_id, active, paused) VALUES ($1, $2, $3, $4)', [
        randomUUID(), agentId, i !== campaignCount, i > campaignCount,
      ]);
    }
    await client.query('INSERT INTO campaigns (campaign_id, agent_id) VALUES ($1, $2)', [randomUUID(), otherAgentId]);
    await client.query('INSERT INTO campaigns (campaign_id, agent_id) VALUES ($1, $2)', [randomUUID(), foreignAgentId]);
    return { networkId, agentId, otherAgentId, foreignAgentId, campaignCount };
  } finally {
    await client.end();
  }
}
