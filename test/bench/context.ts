// What every phase of `npm run bench` shares: the run's database, Redis prefix, simulator, OTLP sink
// and partner keys, the partners and agents of the loads, the processes still running, and the
// figures and failures collected so far. Made once by createContext, released by cleanUp.

import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';
import { migrate } from '../../src/db/migrate.js';
import { createSpendSimulator } from '../../src/spend-simulator/simulator.js';
import { insertNetwork } from '../support/platform-rows.js';
import { freePort } from '../support/process.js';
import type { LoadFigure } from './load.js';
import type { Options } from './options.js';
import { startOtlpSink } from './otlp-sink.js';
import type { BulkFigures } from './phases/bulk.js';
import type { EventFigures } from './phases/events.js';
import type { FeedFigures } from './phases/feed.js';
import type { FloodFigures } from './phases/flood.js';
import type { OpenApiFloodFigures } from './phases/openapi.js';
import type { PreferFigures } from './phases/prefer.js';
import type { StatementCost } from './phases/statements.js';
import type { WebhookIsolationFigures } from './phases/webhook-isolation.js';
import type { WebhookFigures } from './phases/webhooks.js';
import { type Child, pinLoadGenerator, pinning, root, startPinned, tail } from './processes.js';
import { describeMachine, type Machine } from './report.js';

const disableNetworks = 16;
// The enable and disable loads run under a limit that is on (every request pays its Redis round
// trip) but never reached; the 429 path gets its own service process with a limit of 1.
export const unreachableRateLimit = '10000000';

export interface Partner {
  key: string;
  networkId: string;
  name: string;
}

/** One disable of the latency phase: its time and the calls it made to each store. */
export interface DisableRun {
  campaigns: number;
  /** The store topology when it is not the default one server (e.g. 'Redis Cluster'). */
  topology?: string;
  /** The simulator's answer time for this run (0: it answers at once). */
  spendDelayMs?: number;
  ms: number;
  postgres: number;
  redis: number;
  spendManagement: number;
  byOperation: Record<string, number>;
}

export interface ProcessFigures {
  startToReadyMs: number;
  rssAtReadyMiB: number;
  rssAfterLoadMiB?: number;
  peakRssMiB?: number;
}

/** The figures of the run, as the JSON result holds them. */
export interface Results {
  failures: string[];
  loads: Record<string, LoadFigure>;
  disables: DisableRun[];
  concurrent: (LoadFigure & { agents: number; campaignsPerAgent: number; spendManagementCalls: number }) | undefined;
  processes: Record<string, ProcessFigures>;
  exported: { exports: number; bytes: number };
  /** Network B's disable alone and beside network A's load (the fairness figure). */
  fairness?: { aloneMs: number; besideLoadMs: number; spendDelayMs: number; campaigns: number; loadAgents: number; loadCampaigns: number };
  /** A partner's enables alone and beside a flood of bad keys (phases/flood.ts). */
  flood?: FloodFigures;
  prefer?: PreferFigures;
  /** B's status reads alone and beside a flood of OpenAPI documents (phases/openapi.ts). */
  openApiFlood?: OpenApiFloodFigures;
  /** Named against unnamed statements (phases/statements.ts). */
  statements: StatementCost[];
  /** The relay beside the enable load, publishing to NATS JetStream (phases/events.ts). */
  events?: EventFigures;
  /** Partner webhooks (phases/webhooks.ts). */
  webhooks?: WebhookFigures;
  /** Network B's webhooks and requests alone and beside network A's attacks (phases/webhook-isolation.ts). */
  webhookIsolation?: WebhookIsolationFigures;
  /** Bulk status changes (phases/bulk.ts). */
  bulk?: BulkFigures;
  /** The enable beside 50 event streams of the partner events feed (phases/feed.ts). */
  feed?: FeedFigures;
}

/** A service process started the way `npm start` starts it. */
export type Service = Child & {
  statusUrl: string;
  metricsUrl: string;
  /** Reads the service's campaign hashes (a cluster's client in cluster mode); default: the run's Redis. */
  redisReader?: Pick<Redis, 'hget'>;
  /** The store topology when it is not the default one server. */
  topology?: string;
};

/** The run's resources, made before the partners and agents are seeded. */
export interface Resources {
  options: Options;
  database: string;
  databaseUrl: string;
  redisUrl: string;
  /** The run's Redis key prefix; each service process adds its name. */
  prefix: string;
  /** Process logs and the keys file; removed when the run passes. */
  workDir: string;
  keysFile: string;
  admin: pg.Client;
  db: pg.Pool;
  redis: Redis;
  simulator: ReturnType<typeof createSpendSimulator>;
  simulatorUrl: string;
  sink: Awaited<ReturnType<typeof startOtlpSink>>;
  machine: Machine;
  /** The partner-keys document's entries (key → network and name), as written to keysFile. */
  partners: Record<string, { networkId: string; name: string }>;
  badKeys: string[];
  /** Processes still running; stopped by cleanUp. */
  children: Child[];
  results: Results;
}

/** The partners (one network each) and the agents of the loads. */
interface Seeded {
  main: Partner;
  limited: Partner;
  /** The networks that disables under load spread over, `main` first. */
  disablers: Partner[];
  enableAgents: string[];
  limitedAgents: string[];
}

export type BenchContext = Resources & Seeded;

/**
 * Pins this process (the load generator), creates the run's database, connects to Redis, starts the
 * simulator and the sink, prints the run's header line, then migrates and seeds the partners and the
 * enable agents. A failure while seeding releases what was made.
 */
export async function createContext(options: Options): Promise<BenchContext> {
  pinLoadGenerator();
  const adminUrl = process.env.TEST_DATABASE_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  const redisUrl = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
  const runId = `${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
  const database = `pas_bench_${runId}`;
  const workDir = mkdtempSync(join(tmpdir(), 'pas-bench-'));

  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${database}`);
  const databaseUrl = Object.assign(new URL(adminUrl), { pathname: `/${database}` }).toString();
  const db = new pg.Pool({ connectionString: databaseUrl, max: 4 });
  // An idle client whose backend is still going away when the clean-up drops the database (WITH
  // FORCE) gets an error from the server after the pool has ended; without a listener it would crash
  // the run after its results were written.
  db.on('error', () => undefined);
  const redis = new Redis(redisUrl);
  const simulator = createSpendSimulator({ keepRequests: 100_000 });
  await simulator.listen({ port: 0, host: '127.0.0.1' });
  const simulatorUrl = `http://127.0.0.1:${(simulator.server.address() as { port: number }).port}`;
  const sink = await startOtlpSink();

  const [pgVersion, redisInfo] = await Promise.all([db.query('SHOW server_version'), redis.info('server')]);
  const machine = describeMachine(
    pinning,
    String(pgVersion.rows[0].server_version),
    /redis_version:(\S+)/.exec(redisInfo)?.[1] ?? 'unknown',
  );
  console.log(
    `${options.quick ? 'quick' : 'full'} run on ${machine.cpuCount}× ${machine.cpuModel}, Node ${machine.node}, ${pinning ? 'pinned (servers core 0, load core 1)' : 'NOT pinned (taskset or a second core missing)'}, load average ${machine.loadAverageAtStart}, DATABASE_POOLER=${options.database.pooler}${options.database.host ? ` via ${options.database.host}` : ''}`,
  );

  const resources: Resources = {
    options,
    database,
    databaseUrl,
    redisUrl,
    prefix: `pas-bench:${runId}:`,
    workDir,
    keysFile: join(workDir, 'partner-keys.json'),
    admin,
    db,
    redis,
    simulator,
    simulatorUrl,
    sink,
    machine,
    partners: {},
    badKeys: Array.from({ length: 8 }, () => `pk_wrong_${randomBytes(24).toString('base64url')}`),
    children: [],
    results: {
      failures: [],
      loads: {},
      disables: [],
      concurrent: undefined,
      processes: {},
      exported: { exports: 0, bytes: 0 },
      statements: [],
    },
  };
  const seeded = await setUp(resources).catch(async (error: unknown) => {
    await cleanUp(resources);
    throw error;
  });
  return { ...resources, ...seeded };
}

/** The schema, the partners (one network each) and the agents of the loads. */
async function setUp(resources: Resources): Promise<Seeded> {
  console.log(`migrating ${resources.database}…`);
  await migrate(resources.databaseUrl);
  const main = await newPartner(resources, 'bench');
  const limited = await newPartner(resources, 'bench-limited');
  const disablers = [main];
  for (let i = 1; i < disableNetworks; i++) disablers.push(await newPartner(resources, `bench-${i}`));
  writeFileSync(resources.keysFile, JSON.stringify({ 'partner-keys': resources.partners }));
  return {
    main,
    limited,
    disablers,
    enableAgents: await seedAgents(resources, [main], 200, 0),
    limitedAgents: await seedAgents(resources, [limited], 8, 0),
  };
}

async function newPartner(resources: Resources, name: string): Promise<Partner> {
  const networkId = await insertNetwork(resources.db);
  const key = `pk_bench_${randomBytes(24).toString('base64url')}`;
  resources.partners[key] = { networkId, name };
  return { key, networkId, name };
}

/** `count` agents spread over `networks` round-robin, each with `campaigns` campaigns, in two statements. */
export async function seedAgents(ctx: Resources, networks: readonly Partner[], count: number, campaigns: number): Promise<string[]> {
  const agentIds = Array.from({ length: count }, () => `us-east-1:${randomUUID()}`);
  await ctx.db.query('INSERT INTO agents (agent_id, network_id) SELECT * FROM unnest($1::text[], $2::uuid[])', [
    agentIds,
    agentIds.map((_, i) => networks[i % networks.length]!.networkId),
  ]);
  if (campaigns > 0) {
    await ctx.db.query(
      'INSERT INTO campaigns (campaign_id, agent_id) SELECT gen_random_uuid(), a FROM unnest($1::text[]) a, generate_series(1, $2)',
      [agentIds, campaigns],
    );
  }
  await ctx.db.query('ANALYZE agents, campaigns');
  return agentIds;
}

/** Stops what is still running and removes the run's database and Redis keys. */
export async function cleanUp(ctx: Resources): Promise<void> {
  for (const child of [...ctx.children]) await child.stop();
  await ctx.simulator.close();
  await ctx.sink.close();
  await ctx.db.end();
  await ctx.admin.query(`DROP DATABASE ${ctx.database} WITH (FORCE)`);
  await ctx.admin.end();
  for await (const keys of ctx.redis.scanStream({ match: `${ctx.prefix}*`, count: 1000 }) as AsyncIterable<string[]>) {
    if (keys.length) await ctx.redis.del(...keys);
  }
  await ctx.redis.quit();
}

/** Runs one step; a failure is recorded (the run then exits 1) and the next step goes on. */
export async function phase(ctx: BenchContext, name: string, run: () => Promise<void>): Promise<void> {
  try {
    await run();
  } catch (error) {
    ctx.results.failures.push(`${name}: ${(error as Error).message}`);
    console.log(`  FAILED ${name}: ${(error as Error).message}`);
  }
}

/**
 * The production start command: the `start` script of package.json (`[VAR=value …] node <args>`),
 * run with this Node, so that flags added there (heap sizes, preloads) are measured too.
 */
function startCommand(): { args: string[]; env: Record<string, string> } {
  const start = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start;
  const words = start.trim().split(/\s+/);
  // `exec` (the script replaces npm's shell with node, so signals reach it) changes nothing here.
  if (words[0] === 'exec') words.shift();
  const env: Record<string, string> = {};
  while (/^\w+=/.test(words[0] ?? '')) {
    const [name, ...value] = words.shift()!.split('=');
    env[name!] = value.join('=').replace(/^(['"])(.*)\1$/, '$2');
  }
  if (words[0] !== 'node') throw new Error(`the start script does not run node: ${start}`);
  return { args: words.slice(1), env };
}

/** The run's database as the service processes reach it (directly, or through BENCH_DATABASE_HOST). */
function serviceDatabaseUrl(ctx: BenchContext): string {
  const host = ctx.options.database.host;
  return host ? Object.assign(new URL(ctx.databaseUrl), { host }).toString() : ctx.databaseUrl;
}

export async function startService(ctx: BenchContext, name: string, env: Record<string, string>): Promise<Service> {
  const port = await freePort();
  const metricsPort = await freePort();
  const start = startCommand();
  const child = await startPinned({
    name,
    args: [...start.args.slice(0, -1), ...ctx.options.serviceFlags, ...start.args.slice(-1)], // after the start script's flags, which they override
    readyUrl: `http://127.0.0.1:${port}/readyz`,
    logFile: join(ctx.workDir, `${name}.log`),
    env: {
      PATH: process.env.PATH ?? '',
      HOST: '127.0.0.1',
      PORT: String(port),
      METRICS_PORT: String(metricsPort),
      DATABASE_URL: serviceDatabaseUrl(ctx),
      DATABASE_POOLER: ctx.options.database.pooler,
      REDIS_URL: ctx.redisUrl,
      REDIS_KEY_PREFIX: `${ctx.prefix}${name}:`,
      SPEND_MANAGEMENT_URL: ctx.simulatorUrl,
      PARTNER_KEYS_FILE: ctx.keysFile,
      LOG_LEVEL: 'info',
      DRAIN_DELAY_MS: '0',
      // Within the 15 s a stop waits before SIGKILL: whatever the service still waits on at its own
      // deadline is cut, and it exits 0 (docs/interfaces.md §3).
      SHUTDOWN_TIMEOUT_MS: '10000',
      OTEL_SDK_DISABLED: 'true',
      RATE_LIMIT_MAX: unreachableRateLimit,
      // The 401 path is measured as it is: bad keys are shed first only where a phase says so (flood).
      OVERLOAD_UNAUTHENTICATED_UTILIZATION_PERCENT: '100',
      ...start.env,
      ...benchServiceEnvironment(),
      ...env,
    },
  });
  ctx.children.push(child);
  return { ...child, statusUrl: `http://127.0.0.1:${port}/partner/agents/status`, metricsUrl: `http://127.0.0.1:${metricsPort}/metrics` };
}

/** Stops a process with SIGTERM; anything but a clean exit is a failure of the run. */
export async function stop(ctx: BenchContext, child: Child): Promise<void> {
  const code = await child.stop();
  const index = ctx.children.findIndex((running) => running.child === child.child);
  if (index >= 0) ctx.children.splice(index, 1);
  if (code !== 0) ctx.results.failures.push(`${child.name} exited with ${code} on SIGTERM:\n${tail(child.logFile, 10)}`);
}

export async function resetSimulator(ctx: BenchContext): Promise<void> {
  await ctx.simulator.inject({ method: 'POST', url: '/_simulator/reset' });
}

/** Active, unpaused campaigns of these agents in PostgreSQL. */
export async function activeUnpaused(ctx: BenchContext, agentIds: readonly string[]): Promise<number> {
  const {
    rows: [row],
  } = await ctx.db.query('SELECT count(*)::int AS n FROM campaigns WHERE agent_id = ANY($1) AND active AND NOT paused', [agentIds]);
  return row.n as number;
}

/**
 * BENCH_SERVICE_ENV: settings for every service process of the run, `NAME=value` separated by
 * spaces (to see what a setting costs: `BENCH_SERVICE_ENV='EVENTS_RELAY_POLL_INTERVAL_MS=60000'`).
 */
function benchServiceEnvironment(): Record<string, string> {
  const pairs = (process.env.BENCH_SERVICE_ENV ?? '').split(/\s+/).filter(Boolean);
  return Object.fromEntries(
    pairs.map((pair) => {
      const at = pair.indexOf('=');
      if (at < 1) throw new Error(`BENCH_SERVICE_ENV: "${pair}" is not NAME=value`);
      return [pair.slice(0, at), pair.slice(at + 1)];
    }),
  );
}
