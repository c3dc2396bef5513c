// The table of `npm run bench`: one row per figure, with its floor and target where it has them.
import type { ProcessFigures, Results } from './context.js';
import type { Plan } from './options.js';
import { partnerRate } from './phases/flood.js';
import type { Row } from './report.js';

const disableTargets: Record<number, number> = { 100: 10, 10000: 150 };
/** The big disable against a spend management answering in 25 ms a call. */
const acrossNetworkTarget = 300;

/** Start to ready and memory of one service process, each with its upper limit when it has one. */
function processRows(
  name: string,
  figures: ProcessFigures | undefined,
  limits: { startToReady?: number; rssAtReady?: number; rssAfterLoad?: number },
): Row[] {
  if (!figures) return [];
  const row = (figure: string, value: number, unit: string, limit: number | undefined): Row => ({
    figure,
    value,
    unit,
    ...(limit === undefined ? {} : { target: { of: 'value', op: '<=', limit } }),
  });
  return [
    row(`start to ready, ${name}`, figures.startToReadyMs, 'ms', limits.startToReady),
    row(`RSS at ready, ${name}`, figures.rssAtReadyMiB, 'MiB', limits.rssAtReady),
    ...(figures.rssAfterLoadMiB === undefined
      ? []
      : [row(`RSS after the load, ${name}`, figures.rssAfterLoadMiB, 'MiB', limits.rssAfterLoad)]),
  ];
}

/** Answers by status, as `1,142× 200, 1,288× 503`. */
const statuses = (counts: Record<string, number>) =>
  Object.entries(counts)
    .map(([status, count]) => `${count.toLocaleString('en-US')}× ${status}`)
    .join(', ');

/** The rows of the figures the run took, in the table's order; a phase not run has no row. */
export function tableRows(results: Results, plan: Plan): Row[] {
  const { loads, disables, concurrent, processes } = results;
  const load = (name: string) => loads[name];
  const perSecond = (figure: string, name: string, extra: Partial<Row> = {}): Row | undefined => {
    const f = load(name);
    return f && { figure, value: f.requestsPerSecond, unit: 'req/s', detail: `p50 ${f.p50Ms} ms, p99 ${f.p99Ms} ms`, ...extra };
  };
  const floorOf = (figure: string, name: string) => (load(name) ? { floor: { figure, value: load(name)!.requestsPerSecond } } : {});
  const candidates: Array<Row | undefined> = [
    perSecond('floor: bare Fastify route (logger off)', 'floor: bare Fastify route'),
    perSecond('floor: SELECT 1 via node-postgres', 'floor: SELECT 1 via node-postgres'),
    perSecond('floor: SELECT 1 via slonik (service pool)', 'floor: SELECT 1 via slonik (service pool)'),
    perSecond('floor: enable UPDATE alone via node-postgres', 'floor: enable UPDATE alone via node-postgres'),
    perSecond(
      'floor: enable, whole work (rate limit + durable write)',
      'floor: enable (rate-limit EVALSHA + durable write) via node-postgres',
      floorOf('UPDATE alone', 'floor: enable UPDATE alone via node-postgres'),
    ),
    perSecond('enable', 'enable', {
      ...floorOf('enable floor', 'floor: enable (rate-limit EVALSHA + durable write) via node-postgres'),
      target: { of: 'ratio', op: '>=', limit: 0.85 },
    }),
    // The cost of an Idempotency-Key: a claim before the enable and its answer kept after it.
    perSecond('enable with an Idempotency-Key (a new key each)', 'enable, Idempotency-Key', floorOf('enable without one', 'enable')),
    // The same enable against a Redis Cluster (REDIS_CLUSTER=true): the rate limit's one command per request.
    perSecond('enable, Redis Cluster (3 primaries)', 'enable, Redis Cluster', floorOf('one Redis server', 'enable')),
    // Through PgBouncer in transaction mode (DATABASE_POOLER=transaction): unnamed statements, one more hop.
    perSecond('enable, through PgBouncer (transaction mode)', 'enable, through PgBouncer', floorOf('straight to PostgreSQL', 'enable')),
    perSecond('401 path (unknown keys)', '401 path', {
      ...floorOf('bare Fastify', 'floor: bare Fastify route'),
      target: { of: 'ratio', op: '>=', limit: 0.8 },
    }),
    perSecond('429 path (network over its limit)', '429 path', floorOf('bare Fastify', 'floor: bare Fastify route')),
    perSecond('enable, tracing on (always_on, OTLP)', 'enable, tracing on', {
      ...floorOf('tracing off', 'enable'),
      target: { of: 'ratio', op: '>=', limit: 0.7 },
    }),
    perSecond('enable, tracing at the chart default (10 % sampled)', 'enable, tracing 10 %', {
      ...floorOf('tracing off', 'enable'),
      target: { of: 'ratio', op: '>=', limit: 0.9 },
    }),
  ];
  for (const d of disables) {
    const acrossNetwork = d.spendDelayMs !== undefined;
    const target = d.topology
      ? undefined
      : acrossNetwork
        ? d.campaigns === 10_000
          ? acrossNetworkTarget
          : undefined
        : disableTargets[d.campaigns];
    candidates.push({
      figure:
        (acrossNetwork
          ? `disable, ${d.campaigns.toLocaleString('en-US')} campaigns, spend management at ${d.spendDelayMs} ms a call`
          : `disable, ${d.campaigns.toLocaleString('en-US')} campaigns (median of ${plan.runs})`) + (d.topology ? `, ${d.topology}` : ''),
      value: d.ms,
      unit: 'ms',
      detail: `round trips: PostgreSQL ${d.postgres}, Redis ${d.redis}, spend management ${d.spendManagement}`,
      ...(target === undefined ? {} : { target: { of: 'value', op: '<=', limit: target } }),
    });
    if (d.campaigns === 10_000 && !acrossNetwork) {
      candidates.push({
        figure: 'disable, 10,000 campaigns: spend-management calls',
        value: d.spendManagement,
        unit: 'calls',
        target: { of: 'value', op: '=', limit: 100 },
      });
    }
  }
  if (results.fairness) {
    const f = results.fairness;
    candidates.push({
      figure: `fairness: B's disable of ${f.campaigns} beside A's ${f.loadAgents} × ${f.loadCampaigns.toLocaleString('en-US')} (spend management at ${f.spendDelayMs} ms)`,
      value: f.besideLoadMs,
      unit: 'ms',
      detail: `alone ${f.aloneMs} ms`,
      floor: { figure: 'B alone', value: f.aloneMs },
      target: { of: 'ratio', op: '<=', limit: 1.5 },
    });
  }
  if (results.bulk) {
    const k = results.bulk;
    candidates.push(
      {
        figure: `bulk: 1,000 disables (10 campaigns each, spend management at ${k.spendDelayMs} ms) in one batch`,
        value: k.batchDisablesMs,
        unit: 'ms',
        detail: `${k.roundsMs ? `medians of ${k.roundsMs.length} rounds, ` : ''}${k.batchDisableCalls} spend-management calls; as 1,000 single calls on 32 connections ${k.singleDisablesMs} ms, ${k.singleDisableCalls} calls${k.roundsMs ? `; rounds (single calls / batch): ${k.roundsMs.map((one) => `${one.singles} / ${one.batch}`).join(', ')} ms` : ''}`,
        floor: { figure: '1,000 single calls', value: k.singleDisablesMs },
        target: { of: 'ratio', op: '<=', limit: 0.2 },
      },
      {
        figure: 'bulk: spend-management calls of the batch of 1,000 disables',
        value: k.batchDisableCalls,
        unit: 'calls',
        target: { of: 'value', op: '<=', limit: 110 },
      },
      {
        figure: 'bulk: 1,000 enables in one batch',
        value: k.batchEnablesPerSecond,
        unit: 'changes/s',
        floor: { figure: 'single enables on 32 connections', value: k.singleEnablesPerSecond },
        target: { of: 'ratio', op: '>=', limit: 5 },
      },
      {
        figure: "bulk: another network's disable beside a batch of 1,000 disables",
        value: k.otherBesideBatchMs,
        unit: 'ms',
        detail: `median of 5; alone ${k.otherAloneMs} ms${k.batchBesideOtherMs === undefined ? '' : `; that batch ${k.batchBesideOtherMs} ms, ${k.batchBesideOtherCalls} calls`}`,
        floor: { figure: 'alone (median of 5)', value: k.otherAloneMs },
        target: { of: 'ratio', op: '<=', limit: 1.5 },
      },
    );
  }
  if (results.webhooks) {
    const w = results.webhooks;
    candidates.push({
      figure: `webhooks: deliveries to a local receiver (${w.endpoints} endpoints)`,
      value: w.perSecond,
      unit: 'deliveries/s',
      detail: `${w.deliveries.toLocaleString('en-US')} deliveries`,
    });
    candidates.push({
      figure: `webhooks: disable completed to delivered (${w.completions} disables): p99`,
      value: w.completionP99Ms,
      unit: 'ms',
      detail: `p50 ${w.completionP50Ms} ms`,
    });
  }
  if (results.webhookIsolation) {
    const w = results.webhookIsolation;
    for (const [figure, pair, detail] of [
      ["webhooks: B's delivery lag beside A's endpoints whose names stopped answering: p99", w.namesDeliveries, ''],
      ["webhooks: B's delivery lag beside A's flooded endpoints that never answer, on B's host: p99", w.hangingDeliveries, ''],
      [
        "webhooks: B's requests beside A registering names that never resolve, 8 at a time: p99",
        w.namesRegistrations,
        `; A refused at once ${w.namesRegistrations.refusedAtOnce} times`,
      ],
    ] as const) {
      candidates.push({
        figure,
        value: pair.beside.p99Ms,
        unit: 'ms',
        detail: `p50 ${pair.beside.p50Ms} ms (alone ${pair.alone.p50Ms} ms); ${pair.beside.samples} samples a side, ${w.rounds} alternated round${w.rounds === 1 ? '' : 's'}${detail}`,
        floor: { figure: 'alone', value: pair.alone.p99Ms },
        target: { of: 'ratio', op: '<=', limit: 1.5 },
      });
    }
  }
  if (results.flood) {
    const { alone, sheddingOff, sheddingOn } = results.flood;
    const rate = `${partnerRate} req/s`;
    candidates.push({ figure: `enable at ${rate}, alone: p99`, value: alone.p99Ms, unit: 'ms', detail: `p50 ${alone.p50Ms} ms` });
    for (const [name, run] of [
      ['unauthenticated never shed', sheddingOff],
      ['unauthenticated shed first (default)', sheddingOn],
    ] as const) {
      candidates.push(
        {
          figure: `enable at ${rate} beside a flood of bad keys, ${name}: p99`,
          value: run.partner.p99Ms,
          unit: 'ms',
          detail: `p50 ${run.partner.p50Ms} ms`,
          floor: { figure: 'alone', value: alone.p99Ms },
        },
        {
          figure: `the flood of bad keys, ${name}`,
          value: run.flood.requestsPerSecond,
          unit: 'req/s',
          detail: statuses(run.flood.statusCounts),
        },
      );
    }
  }
  if (results.prefer) {
    const { alone, beside, heavy } = results.prefer;
    candidates.push(
      { figure: `enable at ${partnerRate} req/s, alone (B): p99`, value: alone.p99Ms, unit: 'ms', detail: `p50 ${alone.p50Ms} ms` },
      {
        figure: `enable at ${partnerRate} req/s beside another network's 16 KiB Prefer headers (4 connections, 20 req/s): p99`,
        value: beside.p99Ms,
        unit: 'ms',
        detail: `p50 ${beside.p50Ms} ms; A's ${heavy.requestsPerSecond.toLocaleString('en-US')} req/s`,
        floor: { figure: 'alone', value: alone.p99Ms },
        target: { of: 'ratio', op: '<=', limit: 1.5 },
      },
    );
  }
  if (results.openApiFlood) {
    const { alone, beside, flood } = results.openApiFlood;
    candidates.push(
      { figure: `status reads at ${partnerRate} req/s, alone (B): p99`, value: alone.p99Ms, unit: 'ms', detail: `p50 ${alone.p50Ms} ms` },
      {
        figure: `status reads at ${partnerRate} req/s beside a flood of OpenAPI documents (no key, 32 connections, ${flood.requestsPerSecond} req/s): p99`,
        value: beside.p99Ms,
        unit: 'ms',
        detail: `p50 ${beside.p50Ms} ms; the flood's answers: ${statuses(flood.statusCounts)}`,
        floor: { figure: 'alone', value: alone.p99Ms },
        target: { of: 'ratio', op: '<=', limit: 1.5 },
      },
    );
  }
  for (const cost of results.statements) {
    candidates.push({
      figure: `statement ${cost.operation}, unnamed (DATABASE_POOLER=transaction)`,
      value: cost.unnamedUs,
      unit: 'µs',
      detail: `one connection, ${cost.executions.toLocaleString('en-US')} sequential executions`,
      floor: { figure: 'named', value: cost.namedUs },
    });
  }
  // The events relay publishing to NATS JetStream beside the enable load (phases/events.ts).
  const { events } = results;
  candidates.push(
    perSecond('enable, events published to NATS JetStream', 'enable, events to NATS', {
      ...floorOf('enable floor', 'floor: enable (rate-limit EVALSHA + durable write) via node-postgres'),
      target: { of: 'ratio', op: '>=', limit: 0.85 },
    }),
  );
  if (events) {
    candidates.push(
      {
        figure: 'events relayed to NATS JetStream beside the enable load',
        value: events.relayedPerSecond,
        unit: 'events/s',
        detail: `${events.events.toLocaleString('en-US')} events; all published ${events.drainMs} ms after the load`,
      },
      {
        figure: 'event commit to stream acknowledgement beside the enable load: p99',
        value: events.lagP99Ms,
        unit: 'ms',
        detail: `p50 ${events.lagP50Ms} ms, max ${events.lagMaxMs} ms`,
        target: { of: 'value', op: '<=', limit: 100 },
      },
    );
  }
  if (concurrent) {
    candidates.push(
      perSecond(
        `disables under load (${concurrent.agents} agents of ${concurrent.campaignsPerAgent} campaigns, ${plan.connections} at a time)`,
        'disables under load',
      ),
    );
  }
  candidates.push(
    ...processRows('tracing off', processes['tracing off'], { startToReady: 1_000, rssAtReady: 100, rssAfterLoad: 250 }),
    ...processRows('tracing on', processes['tracing on'], { rssAfterLoad: 300 }),
  );
  return candidates.filter((row): row is Row => row !== undefined);
}
