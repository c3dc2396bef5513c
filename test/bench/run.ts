// `npm run bench` (docs/interfaces.md §8; issues 10, 11 and 12): the built service, started as
// `npm start` starts it (at LOG_LEVEL=info), against this machine's PostgreSQL and Redis and the
// spend-management simulator, beside floors measured in the same run, each in its own process.
// Servers are pinned to core 0 and this process, the load generator, to core 1 when taskset is
// there. Every load has a warm-up; any unexpected status, error or time-out fails the run (exit 1).
// Prints one table and writes it as JSON under test/bench/results/ with the machine.
//
// `npm run bench -- --quick`: a second or two per figure and small campaign counts, no targets
// judged; for CI, so the benchmark never rots.
// `npm run bench -- --only=disables,401`: only those phases (for profiling; full figures, written
// where a quick run's go, never as the results of record). BENCH_SERVICE_FLAGS adds Node flags to the service
// processes (`--cpu-prof --cpu-prof-dir=/tmp/prof`, say).
//
// This file is the driver: the options (options.ts), the shared context (context.ts), the phases in
// their order (phases/), the table (rows.ts, report.ts).
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { cleanUp, createContext, phase, type Service, startService, stop } from './context.js';
import { isSelected, type Phase, parseOptions } from './options.js';
import { bulkPhase } from './phases/bulk.js';
import { clusterPhase } from './phases/cluster.js';
import { disablesUnderLoad } from './phases/concurrent.js';
import { disableAcrossNetwork, disableLatency } from './phases/disable-latency.js';
import { enablePhase, idempotencyPhase } from './phases/enable.js';
import { eventsPhase } from './phases/events.js';
import { fairness } from './phases/fairness.js';
import { feedPhase } from './phases/feed.js';
import { partnerBesideFlood } from './phases/flood.js';
import { databaseFloors, floor } from './phases/floors.js';
import { partnerBesideOpenApiFlood } from './phases/openapi.js';
import { poolerPhase } from './phases/pooler.js';
import { partnerBesidePreferHeaders } from './phases/prefer.js';
import { overTheLimit } from './phases/rate-limited.js';
import { statementCosts } from './phases/statements.js';
import { sampledEnable, tracedEnable } from './phases/tracing.js';
import { unknownKeys } from './phases/unauthorized.js';
import { webhookIsolationPhase } from './phases/webhook-isolation.js';
import { webhooksPhase } from './phases/webhooks.js';
import { memoryOf, root } from './processes.js';
import { renderTable, verdictOf, writeResults } from './report.js';
import { tableRows } from './rows.js';

const options = parseOptions(process.argv, process.env);
const { plan, quick, only } = options;
const ctx = await createContext(options);
const { results } = ctx;
const selected = (name: Phase) => isSelected(options, name);

/** The service with tracing off: up for the whole run, idle while the floors and the other processes run. */
async function startMainService(): Promise<Service> {
  const service = await startService(ctx, 'service', {});
  results.processes['tracing off'] = { startToReadyMs: service.startToReadyMs, rssAtReadyMiB: service.rssAtReadyMiB };
  console.log(`  tracing off: start to ready ${service.startToReadyMs} ms, RSS at ready ${service.rssAtReadyMiB} MiB`);
  return service;
}

async function stopMainService(service: Service): Promise<void> {
  const memory = memoryOf(service.child.pid!);
  results.processes['tracing off'] = { ...results.processes['tracing off']!, rssAfterLoadMiB: memory.rssMiB, peakRssMiB: memory.peakMiB };
  console.log(`  tracing off: RSS after the load ${memory.rssMiB} MiB (peak ${memory.peakMiB} MiB)`);
  await stop(ctx, service);
}

// ---------------------------------------------------------------------------------------------
// The run. Each ratio's two figures are taken one right after the other, so that a change in the
// machine's other work between them distorts it as little as possible; the service (tracing off)
// stays up, idle, while the floors and the other service processes run.

console.log(`${plan.connections} connections, ${plan.warmupSeconds} s warm-up, ${plan.seconds} s a load (enable ${plan.enableSeconds} s)`);
let service: Service | undefined;
await phase(ctx, 'service (tracing off)', async () => {
  service = await startMainService();
});
if (selected('floors')) await databaseFloors(ctx);
const up = service;
if (up && selected('enable')) await enablePhase(ctx, up);
if (selected('statements')) await phase(ctx, 'named and unnamed statements', () => statementCosts(ctx));
if (up && selected('idempotency')) await idempotencyPhase(ctx, up);
if (selected('tracing')) {
  await phase(ctx, 'service (tracing on)', () => tracedEnable(ctx));
  await phase(ctx, 'service (tracing 10 %)', () => sampledEnable(ctx));
}
if (selected('401') || selected('429')) await floor(ctx, 'bare', 'floor: bare Fastify route');
if (up && selected('401')) await phase(ctx, '401 path', () => unknownKeys(ctx, up));
if (up && selected('flood')) await phase(ctx, 'a partner beside a flood of bad keys', () => partnerBesideFlood(ctx, up));
if (up && selected('prefer')) await phase(ctx, 'a partner beside 16 KiB Prefer headers', () => partnerBesidePreferHeaders(ctx, up));
if (up && selected('openapi')) await phase(ctx, 'a partner beside a flood of OpenAPI documents', () => partnerBesideOpenApiFlood(ctx, up));
if (selected('429')) await phase(ctx, '429 path', () => overTheLimit(ctx));
if (up) {
  if (selected('disables')) {
    await phase(ctx, 'disable latency', () => disableLatency(ctx, up));
    await phase(ctx, 'disable latency, spend management at 25 ms', () => disableAcrossNetwork(ctx, up));
  }
  if (selected('cluster')) await phase(ctx, 'Redis Cluster', () => clusterPhase(ctx));
  if (selected('pooler')) await phase(ctx, 'PgBouncer', () => poolerPhase(ctx));
  if (selected('fairness')) await phase(ctx, 'fairness', () => fairness(ctx, up));
  if (selected('concurrent')) await phase(ctx, 'disables under load', () => disablesUnderLoad(ctx, up));
  if (selected('bulk')) await phase(ctx, 'bulk status changes', () => bulkPhase(ctx));
  await stopMainService(up);
}
// After the main service has stopped: its relay (no broker) would mark the events' rows relayed
// before the events service's relay could publish them.
if (selected('events')) await phase(ctx, 'events', () => eventsPhase(ctx));
// After the main service stopped: its sender may not reach the receiver on 127.0.0.1.
if (selected('webhooks')) await webhooksPhase(ctx);
if (selected('webhook-isolation')) await webhookIsolationPhase(ctx);
// A service of its own, after the main one stopped: only its own streams and load on the machine.
if (selected('feed')) await feedPhase(ctx);

// ---------------------------------------------------------------------------------------------
// The table

const rows = tableRows(results, plan);
const at = new Date();
const judge = !quick && !only;
console.log(`\n${renderTable(rows, judge)}\n`);
const written = writeResults(join(root, 'test/bench/results'), quick || only !== undefined, at, {
  at: at.toISOString(),
  mode: only ? `only ${[...only].join(',')}` : quick ? 'quick' : 'full',
  machine: ctx.machine,
  plan,
  table: rows.map((row) => ({ ...row, result: verdictOf(row, judge) })),
  loads: results.loads,
  disables: results.disables,
  concurrentDisables: results.concurrent,
  fairness: results.fairness,
  bulk: results.bulk,
  flood: results.flood,
  prefer: results.prefer,
  openApiFlood: results.openApiFlood,
  statements: results.statements,
  events: results.events,
  webhooks: results.webhooks,
  webhookIsolation: results.webhookIsolation,
  feed: results.feed,
  processes: results.processes,
  tracingExport: results.exported,
  failures: results.failures,
});
console.log(`written to ${written.map((path) => path.slice(root.length)).join(' and ')}`);

// ---------------------------------------------------------------------------------------------
// Clean-up; the exit code says whether every answer was the expected one

await cleanUp(ctx);
rmSync(ctx.keysFile, { force: true });

if (results.failures.length > 0) {
  console.log(`\nFAILED (${results.failures.length}); process logs kept in ${ctx.workDir}:`);
  for (const failure of results.failures) console.log(`- ${failure}`);
  process.exit(1);
}
rmSync(ctx.workDir, { recursive: true, force: true });
const misses = rows.filter((row) => verdictOf(row, judge) === 'miss').length;
console.log(
  !judge ? 'quick or partial run: every answer as expected; targets not judged' : `every answer as expected; ${misses} target(s) missed`,
);
