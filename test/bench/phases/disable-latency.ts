// Disable latency by campaign count (`--only=disables`), with the round trips to each store, every
// disable checked in all three stores.
import { insertCampaigns } from '../../support/platform-rows.js';
import type { BenchContext, DisableRun, Service } from '../context.js';
import { activeUnpaused, resetSimulator, seedAgents } from '../context.js';

/**
 * Round trips to each store, from the service's dependency histogram (calls answered, not rejected
 * by a breaker). Not counted for a disable: what runs on its own clock (the worker's claims, the
 * pending-disables gauge, readiness pings); byOperation in the JSON keeps everything.
 */
const background = /\/(ping|claim_pending_disables|release_owned_disables|pending_disable_stats)$/;
async function dependencyCalls(metricsUrl: string): Promise<Record<string, number>> {
  const text = await (await fetch(metricsUrl)).text();
  const calls: Record<string, number> = {};
  for (const [, labelText, value] of text.matchAll(/^dependency_request_duration_seconds_count\{([^}]*)\} (\S+)$/gm)) {
    const labels = Object.fromEntries([...labelText!.matchAll(/(\w+)="([^"]*)"/g)].map(([, k, v]) => [k, v]));
    if (labels.outcome === 'rejected') continue;
    const name = `${labels.dependency}/${labels.operation}`;
    calls[name] = (calls[name] ?? 0) + Number(value);
  }
  return calls;
}

function callsBetween(before: Record<string, number>, after: Record<string, number>) {
  const byOperation: Record<string, number> = {};
  for (const [name, count] of Object.entries(after)) {
    const delta = count - (before[name] ?? 0);
    if (delta > 0) byOperation[name] = delta;
  }
  const total = (dependency: string) =>
    Object.entries(byOperation)
      .filter(([name]) => name.startsWith(`${dependency}/`) && !background.test(name))
      .reduce((sum, [, n]) => sum + n, 0);
  return { postgres: total('postgres'), redis: total('redis'), byOperation };
}

/** Campaign ids of `ids` that are paused in Redis (`<prefix>campaign:<id>` field paused = 1), one command a key. */
async function pausedInRedis(ctx: BenchContext, service: Service, ids: readonly string[]): Promise<number> {
  const reader = service.redisReader ?? ctx.redis;
  const prefix = `${ctx.prefix}${service.name}:`;
  const answers = await Promise.all(ids.map((id) => reader.hget(`${prefix}campaign:${id}`, 'paused')));
  return answers.filter((value) => value === '1').length;
}

async function disableOnce(ctx: BenchContext, service: Service, campaigns: number, spendDelayMs = 0): Promise<DisableRun> {
  const { db, main, simulator } = ctx;
  const agentId = (await seedAgents(ctx, [main], 1, 0))[0]!;
  const ids = await insertCampaigns(db, agentId, campaigns);
  await db.query('ANALYZE campaigns');
  await resetSimulator(ctx);
  if (spendDelayMs > 0) simulator.simulator.setMode('slow', { delayMs: spendDelayMs });
  const before = await dependencyCalls(service.metricsUrl);
  const started = performance.now();
  const response = await fetch(service.statusUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': main.key },
    body: JSON.stringify({ agentId, enabled: false }),
  });
  const body = (await response.json()) as { pausedCampaignCount?: number };
  const ms = Math.round((performance.now() - started) * 10) / 10;
  const calls = callsBetween(before, await dependencyCalls(service.metricsUrl));
  const spendManagement = simulator.simulator.requests().length;
  if (response.status !== 200 || body.pausedCampaignCount !== campaigns) {
    throw new Error(`disable of ${campaigns} campaigns answered ${response.status} with pausedCampaignCount ${body.pausedCampaignCount}`);
  }
  const [left, inRedis] = await Promise.all([activeUnpaused(ctx, [agentId]), pausedInRedis(ctx, service, ids)]);
  const inSpend = ids.filter((id) => simulator.simulator.isPaused(id)).length;
  if (left !== 0 || inRedis !== campaigns || inSpend !== campaigns) {
    throw new Error(
      `disable of ${campaigns} campaigns: ${left} left unpaused in PostgreSQL, ${inRedis} paused in Redis, ${inSpend} in spend management`,
    );
  }
  return {
    campaigns,
    ...(service.topology ? { topology: service.topology } : {}),
    ...(spendDelayMs > 0 ? { spendDelayMs } : {}),
    ms,
    postgres: calls.postgres,
    redis: calls.redis,
    spendManagement,
    byOperation: calls.byOperation,
  };
}

export async function disableLatency(ctx: BenchContext, service: Service): Promise<void> {
  const { plan, quick } = ctx.options;
  console.log(`  disable latency by campaign count (median of ${plan.runs}, after warm-up disables):`);
  for (const campaigns of plan.campaignCounts) {
    // A replica in service has run this path many times; the first disables of a process run
    // code V8 has not optimised yet. 10,000 campaigns are 100 batches: one disable warms them.
    const warmUps = quick ? 1 : campaigns >= 10_000 ? 1 : 5;
    for (let warmUp = 0; warmUp < warmUps; warmUp++) await disableOnce(ctx, service, campaigns);
    const runs: DisableRun[] = [];
    for (let run = 0; run < plan.runs; run++) runs.push(await disableOnce(ctx, service, campaigns));
    const median = runs.sort((a, b) => a.ms - b.ms)[Math.floor(runs.length / 2)]!;
    ctx.results.disables.push(median);
    console.log(
      `    ${campaigns}: ${median.ms} ms; round trips: PostgreSQL ${median.postgres}, Redis ${median.redis}, spend management ${median.spendManagement}`,
    );
  }
}

/**
 * The big disable against a spend management that answers across a network (`--only=disables`):
 * the simulator answers each call after `spendDelayMs`, as a real one does, so the figure shows how
 * many calls one disable keeps in flight.
 */
export async function disableAcrossNetwork(ctx: BenchContext, service: Service): Promise<void> {
  const { plan, quick } = ctx.options;
  const campaigns = quick ? 1_000 : 10_000;
  const spendDelayMs = 25;
  console.log(
    `  disable of ${campaigns} campaigns, spend management answering in ${spendDelayMs} ms${service.topology ? ` (${service.topology})` : ''}:`,
  );
  try {
    await disableOnce(ctx, service, campaigns, spendDelayMs); // warm-up
    const runs: DisableRun[] = [];
    for (let run = 0; run < (quick ? 1 : 3); run++) runs.push(await disableOnce(ctx, service, campaigns, spendDelayMs));
    const median = runs.sort((a, b) => a.ms - b.ms)[Math.floor(runs.length / 2)]!;
    ctx.results.disables.push(median);
    console.log(
      `    ${campaigns}: ${median.ms} ms; round trips: PostgreSQL ${median.postgres}, Redis ${median.redis}, spend management ${median.spendManagement} (runs ${plan.runs > 1 ? 3 : 1})`,
    );
  } finally {
    ctx.simulator.simulator.setMode('ok');
  }
}
