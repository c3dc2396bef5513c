// `npm run bench`: throughput and latency of the service against its floors, on this machine,
// with a real PostgreSQL and Redis and the simulator (CONTRACT.md section 8). Prints a table and
// writes the same figures to test/bench/results/latest.json. Every load is bounded in time and
// sent to 127.0.0.1 only.
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { Redis } from 'ioredis';
import pg from 'pg';
import { migrate } from '../../src/db/migrate.js';
import { createSpendSimulator } from '../../src/spend-simulator/simulator.js';
import { freePort, startServiceProcess } from '../support/process.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const adminUrl = process.env.TEST_DATABASE_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const redisUrl = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const seconds = Number(process.env.BENCH_SECONDS ?? 5);
const connections = Number(process.env.BENCH_CONNECTIONS ?? 50);

interface LoadResult { name: string; requestsPerSecond: number; p50Ms: number; p99Ms: number; errors: number; non2xx: number }
interface DisableResult { campaigns: number; ms: number; postgres: number; redis: number; spendManagement: number }

const runId = `${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
const database = `pas_bench_${runId}`;
const prefix = `pas-bench:${runId}:`;
const admin = new pg.Client({ connectionString: adminUrl });
await admin.connect();
await admin.query(`CREATE DATABASE ${database}`);
const url = new URL(adminUrl);
url.pathname = `/${database}`;
const databaseUrl = url.toString();
await migrate(databaseUrl);
const db = new pg.Pool({ connectionString: databaseUrl, max: 4 });

const simulator = createSpendSimulator({ keepRequests: 10 });
await simulator.listen({ port: 0, host: '127.0.0.1' });
const keysDir = mkdtempSync(join(tmpdir(), 'pas-bench-'));
const key = `pk_bench_${randomBytes(24).toString('base64url')}`;
const networkId = randomUUID();
writeFileSync(join(keysDir, 'partner-keys.json'), JSON.stringify({ 'partner-keys': { [key]: { networkId, name: 'bench' } } }));
await db.query('INSERT INTO networks (network_id) VALUES ($1)', [networkId]);
const agents = Array.from({ length: 200 }, () => `us-east-1:${randomUUID()}`);
await db.query('INSERT INTO agents (agent_id, network_id) SELECT a, $2 FROM unnest($1::text[]) a', [agents, networkId]);

console.log('building and starting the service and the floors…');
const service = await startServiceProcess({
  DATABASE_URL: databaseUrl, REDIS_URL: redisUrl, REDIS_KEY_PREFIX: prefix,
  SPEND_MANAGEMENT_URL: `http://127.0.0.1:${(simulator.server.address() as { port: number }).port}`,
  PARTNER_KEYS_FILE: join(keysDir, 'partner-keys.json'), OTEL_SDK_DISABLED: 'true', LOG_LEVEL: 'warn', DRAIN_DELAY_MS: '0',
});
const floorPort = await freePort();
const floors = spawn(process.execPath, ['--import', 'tsx', 'test/bench/floor-server.ts'], {
  cwd: root, env: { ...process.env, PORT: String(floorPort), DATABASE_URL: databaseUrl, BENCH_AGENTS: agents.join(',') }, stdio: ['ignore', 'pipe', 'inherit'],
});
await new Promise<void>((resolve) => floors.stdout!.on('data', (chunk) => chunk.toString().includes('ready') && resolve()));

async function load(name: string, options: autocannon.Options): Promise<LoadResult> {
  const result = await autocannon({ connections, duration: seconds, ...options });
  const row = {
    name,
    requestsPerSecond: Math.round(result.requests.average),
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    errors: result.errors + result.timeouts,
    non2xx: result.non2xx,
  };
  console.log(`  ${name}: ${row.requestsPerSecond} req/s, p50 ${row.p50Ms} ms, p99 ${row.p99Ms} ms`);
  return row;
}

function statusRequests(enabled: boolean, apiKey = key): autocannon.Options {
  let next = 0;
  return {
    url: `${service.baseUrl}/partner/agents/status`,
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': apiKey },
    requests: [{
      setupRequest: (request) => ({ ...request, body: JSON.stringify({ agentId: agents[next++ % agents.length], enabled }) }),
    }],
  };
}

async function callsByDependency(): Promise<Record<string, number>> {
  const text = await (await fetch(`${service.metricsUrl}/metrics`)).text();
  const counts: Record<string, number> = {};
  for (const match of text.matchAll(/^dependency_request_duration_seconds_count\{dependency="(\w+)"[^}]*\} (\d+)/gm)) {
    counts[match[1]!] = (counts[match[1]!] ?? 0) + Number(match[2]);
  }
  return counts;
}

const loads: LoadResult[] = [];
console.log(`load: ${connections} connections, ${seconds} s each`);
loads.push(await load('floor: bare Fastify route', { url: `http://127.0.0.1:${floorPort}/bare` }));
loads.push(await load('floor: SELECT 1 via node-postgres', { url: `http://127.0.0.1:${floorPort}/pg` }));
loads.push(await load('floor: SELECT 1 via slonik (service pool settings)', { url: `http://127.0.0.1:${floorPort}/slonik` }));
loads.push(await load('floor: the enable\'s UPDATE via slonik', { url: `http://127.0.0.1:${floorPort}/slonik-update` }));
loads.push(await load('enable', statusRequests(true)));
loads.push(await load('disable (nothing left to pause)', statusRequests(false)));
loads.push(await load('401: unknown key', statusRequests(true, `pk_wrong_${randomBytes(12).toString('hex')}`)));

console.log('disable latency by campaign count (median of 3 runs):');
const disables: DisableResult[] = [];
for (const campaigns of [0, 100, 1_000, 10_000]) {
  const runs: DisableResult[] = [];
  for (let run = 0; run < 3; run++) {
    const agentId = `us-east-1:${randomUUID()}`;
    await db.query('INSERT INTO agents (agent_id, network_id) VALUES ($1, $2)', [agentId, networkId]);
    await db.query('INSERT INTO campaigns (campaign_id, agent_id) SELECT gen_random_uuid(), $1 FROM generate_series(1, $2)', [agentId, campaigns]);
    const before = await callsByDependency();
    const started = performance.now();
    const response = await fetch(`${service.baseUrl}/partner/agents/status`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key }, body: JSON.stringify({ agentId, enabled: false }),
    });
    const ms = performance.now() - started;
    const body = (await response.json()) as { pausedCampaignCount: number };
    if (response.status !== 200 || body.pausedCampaignCount !== campaigns) throw new Error(`disable of ${campaigns} campaigns answered ${response.status}`);
    const after = await callsByDependency();
    const delta = (name: string) => (after[name] ?? 0) - (before[name] ?? 0);
    runs.push({ campaigns, ms: Math.round(ms * 10) / 10, postgres: delta('postgres'), redis: delta('redis'), spendManagement: delta('spend_management') });
  }
  const median = runs.sort((a, b) => a.ms - b.ms)[1]!;
  disables.push(median);
  console.log(`  ${campaigns} campaigns: ${median.ms} ms; round trips: PostgreSQL ${median.postgres}, Redis ${median.redis}, spend management ${median.spendManagement}`);
}

const results = { at: new Date().toISOString(), machine: { cpus: (await import('node:os')).cpus().length, node: process.version }, seconds, connections, loads, disables };
writeFileSync(join(root, 'test/bench/results/latest.json'), `${JSON.stringify(results, null, 2)}\n`);
console.log('\n| load | req/s | p50 ms | p99 ms | errors | non-2xx |\n| --- | --- | --- | --- | --- | --- |');
for (const l of loads) console.log(`| ${l.name} | ${l.requestsPerSecond} | ${l.p50Ms} | ${l.p99Ms} | ${l.errors} | ${l.non2xx} |`);
console.log('\n| campaigns | disable ms | PostgreSQL | Redis | spend management |\n| --- | --- | --- | --- | --- |');
for (const d of disables) console.log(`| ${d.campaigns} | ${d.ms} | ${d.postgres} | ${d.redis} | ${d.spendManagement} |`);
console.log('\nwritten to test/bench/results/latest.json');

floors.kill('SIGTERM');
await service.stop();
await simulator.close();
await db.end();
await admin.query(`DROP DATABASE ${database} WITH (FORCE)`);
await admin.end();
const redis = new Redis(redisUrl);
const stale = await redis.keys(`${prefix}*`);
if (stale.length) await redis.del(...stale);
await redis.quit();
rmSync(keysDir, { recursive: true, force: true });
