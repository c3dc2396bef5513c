// A partner beside a flood of bad keys (`--only=flood`, issue 18): a partner's enables at a steady
// rate alone, then again while a flood of unknown keys runs flat out on as many connections as the
// other loads. The partner's p99 with and without the flood, and the flood's throughput and answers
// (401, or 503 once the replica sheds unauthenticated requests first, docs/interfaces.md §10).
import autocannon from 'autocannon';
import { type BenchContext, type Service, startService, stop } from '../context.js';
import { type LoadFigure, measure, statusPosts } from '../load.js';

/** The partner's steady rate: well within what an enable costs, so any rise of its p99 is the flood's doing. */
export const partnerRate = 200;
const partnerConnections = 4;

interface FloodRun {
  partner: LoadFigure;
  flood: { requestsPerSecond: number; statusCounts: Record<string, number>; errors: number };
}

export interface FloodFigures {
  alone: LoadFigure;
  /** The benchmark's main service: unauthenticated requests never shed (OVERLOAD_UNAUTHENTICATED_UTILIZATION_PERCENT=100). */
  sheddingOff: FloodRun;
  /** A service with the default: unauthenticated requests shed first while the process is busy. */
  sheddingOn: FloodRun;
}

/** The partner's enables at a steady rate, beside a flood of bad keys that runs through them. */
async function besideFlood(ctx: BenchContext, service: Service, name: string): Promise<FloodRun> {
  const { options, badKeys, enableAgents, results } = ctx;
  const plan = { ...options.loadPlan, connections: partnerConnections };
  const flood = autocannon({
    ...statusPosts(service.statusUrl, badKeys, enableAgents, true),
    connections: options.plan.connections,
    duration: plan.warmupSeconds + plan.seconds + 1.5,
  }) as unknown as PromiseLike<autocannon.Result>;
  // The flood first, long enough for the replica to see it (under-pressure samples every second).
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  const partner = await measure(`enable at ${partnerRate} req/s, beside the flood (${name})`, partnerLoad(ctx, service), plan);
  results.failures.push(...partner.problems);
  const floodResult = await flood;
  const statusCounts = Object.fromEntries(
    Object.entries(floodResult.statusCodeStats as Record<string, { count: number }>).map(([status, { count }]) => [status, count]),
  );
  if (Object.keys(statusCounts).some((status) => status !== '401' && status !== '503')) {
    results.failures.push(`flood of bad keys (${name}): answers other than 401 and 503: ${JSON.stringify(statusCounts)}`);
  }
  const run = {
    partner: partner.figure,
    flood: { requestsPerSecond: Math.round(floodResult.requests.total / floodResult.duration), statusCounts, errors: floodResult.errors },
  };
  console.log(
    `  flood of bad keys (${name}): ${run.flood.requestsPerSecond} req/s (${Object.entries(statusCounts)
      .map(([status, count]) => `${count}× ${status}`)
      .join(', ')})`,
  );
  return run;
}

const partnerLoad = (ctx: BenchContext, service: Service) => ({
  ...statusPosts(service.statusUrl, [ctx.main.key], ctx.enableAgents, true),
  overallRate: partnerRate,
});

export async function partnerBesideFlood(ctx: BenchContext, service: Service): Promise<void> {
  const plan = { ...ctx.options.loadPlan, connections: partnerConnections };
  const alone = await measure(`enable at ${partnerRate} req/s, alone`, partnerLoad(ctx, service), plan);
  ctx.results.failures.push(...alone.problems);
  const sheddingOff = await besideFlood(ctx, service, 'unauthenticated never shed');
  const shedding = await startService(ctx, 'service (sheds unauthenticated first)', { OVERLOAD_UNAUTHENTICATED_UTILIZATION_PERCENT: '50' });
  try {
    const sheddingOn = await besideFlood(ctx, shedding, 'unauthenticated shed first, the default');
    ctx.results.flood = { alone: alone.figure, sheddingOff, sheddingOn };
  } finally {
    await stop(ctx, shedding);
  }
}
