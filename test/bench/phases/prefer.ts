// One partner must not cost another anything (`--only=prefer`, issue 26): network B's enables at a
// steady rate alone, then beside network A sending disables with the worst `Prefer` header a request
// can carry (about 16 KiB of whitespace around `respond-async`) on 4 connections, for agent ids
// outside A's network (404: the header must cost nothing there, docs/interfaces.md §11). A sends
// at what the default rate limit lets one network send (RATE_LIMIT_MAX 1,200 a minute, 20 a
// second): what a partner can do in production, where the benchmark's own limit is out of reach.
import { randomUUID } from 'node:crypto';
import autocannon from 'autocannon';
import type { BenchContext, Service } from '../context.js';
import { type LoadFigure, measure, statusPosts } from '../load.js';
import { partnerRate } from './flood.js';

const connections = 4;
/** The default RATE_LIMIT_MAX (1,200 per 60 s) as a rate. */
const heavyRate = 20;
/** Within Node's 16 KiB limit for all of a request's headers together. */
const worstPrefer = `respond-async,${' '.repeat(15_800)}wait=1`;

export interface PreferFigures {
  alone: LoadFigure;
  beside: LoadFigure;
  /** Network A's requests a second, and how they were answered. */
  heavy: { requestsPerSecond: number; statusCounts: Record<string, number> };
}

export async function partnerBesidePreferHeaders(ctx: BenchContext, service: Service): Promise<void> {
  const { options, main, disablers, enableAgents, results } = ctx;
  const attacker = disablers.find((partner) => partner.key !== main.key)!;
  const plan = { ...options.loadPlan, connections };
  const partnerLoad = { ...statusPosts(service.statusUrl, [main.key], enableAgents, true), overallRate: partnerRate };
  const alone = await measure(`enable at ${partnerRate} req/s, alone (B)`, partnerLoad, plan);
  results.failures.push(...alone.problems);
  // Agent ids of no agent of A's network: well-formed, so only the network check turns them away.
  const strangers = Array.from({ length: 64 }, () => `us-east-1:${randomUUID()}`);
  const heavy = autocannon({
    ...statusPosts(service.statusUrl, [attacker.key], strangers, false, () => ({ prefer: worstPrefer })),
    connections,
    overallRate: heavyRate,
    duration: plan.warmupSeconds + plan.seconds + 1.5,
  }) as unknown as PromiseLike<autocannon.Result>;
  await new Promise((resolve) => setTimeout(resolve, 500));
  const beside = await measure(`enable at ${partnerRate} req/s, beside 16 KiB Prefer headers (B beside A)`, partnerLoad, plan);
  results.failures.push(...beside.problems);
  const heavyResult = await heavy;
  const statusCounts = Object.fromEntries(
    Object.entries(heavyResult.statusCodeStats as Record<string, { count: number }>).map(([status, { count }]) => [status, count]),
  );
  if (Object.keys(statusCounts).some((status) => status !== '404' && status !== '429')) {
    results.failures.push(`16 KiB Prefer headers: answers other than 404 (and 429): ${JSON.stringify(statusCounts)}`);
  }
  const requestsPerSecond = Math.round(heavyResult.requests.total / heavyResult.duration);
  console.log(`  16 KiB Prefer headers from another network: ${requestsPerSecond} req/s (${JSON.stringify(statusCounts)})`);
  results.prefer = { alone: alone.figure, beside: beside.figure, heavy: { requestsPerSecond, statusCounts } };
}
