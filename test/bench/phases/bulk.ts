// Bulk status changes (`--only=bulk`, docs/interfaces.md §16), on a service process of its own
// (DISABLES_IN_FLIGHT_PER_NETWORK high enough for 1,000 disables at once, the spend-management
// simulator answering in 25 ms):
// - 1,000 disables of agents with 10 campaigns each, as 1,000 single calls on 32 connections, then
//   1,000 others as one batch alone: the time each took and the spend-management calls each made,
//   three rounds of the two (the medians are compared: one batch of half a second is one sample of
//   a noisy machine, as one run of single calls is);
// - 1,000 enables, single calls on 32 connections against one batch: changes a second;
// - another network's single disable (10 campaigns) alone, then beside a second batch of 1,000
//   disables: the median of 5 one after another each time (one disable is one sample of a noisy
//   machine). The batch that is compared with the single calls runs alone, as they did: beside
//   another network's changes a batch gives up most of its spend-management slots (a fifth kept,
//   src/agents/shared-calls.ts), and that yielding is what the other network's figure measures, so
//   the second batch's own time is printed beside it, not judged against the single calls.
import type { BenchContext, Service } from '../context.js';
import { activeUnpaused, resetSimulator, seedAgents, startService, stop } from '../context.js';

const agents = 1_000;
const campaignsPerAgent = 10;
const spendDelayMs = 25;
const connections = 32;
/** Rounds of 1,000 single disables and a batch of 1,000 others, one after the other. */
const rounds = 3;

export interface BulkFigures {
  agents: number;
  campaignsPerAgent: number;
  spendDelayMs: number;
  /** Medians of `rounds` rounds (each round's figure in `roundsMs`). */
  singleDisablesMs: number;
  /** The most any round's single calls made. */
  singleDisableCalls: number;
  batchDisablesMs: number;
  /** The most any round's batch made. */
  batchDisableCalls: number;
  /** Each round's single calls and batch (absent from runs before 2026-11-29 evening). */
  roundsMs?: Array<{ singles: number; batch: number }>;
  singleEnablesPerSecond: number;
  batchEnablesPerSecond: number;
  /** Medians of `otherSamples` disables, one after another. */
  otherAloneMs: number;
  otherBesideBatchMs: number;
  /** The second batch, beside the other network's disables: its time and calls (not judged; absent from runs before 2026-11-29 evening). */
  batchBesideOtherMs?: number;
  batchBesideOtherCalls?: number;
}

/** Another network's disables alone, and again beside the batch (the median of each). */
const otherSamples = 5;

const batchUrl = (service: Service) => `${service.statusUrl}/batch`;

async function single(service: Service, key: string, agentId: string, enabled: boolean): Promise<void> {
  const response = await fetch(service.statusUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key },
    body: JSON.stringify({ agentId, enabled }),
  });
  const body = (await response.json()) as { pausedCampaignCount?: number };
  const expected = enabled ? 0 : campaignsPerAgent;
  if (response.status !== 200 || body.pausedCampaignCount !== expected) {
    throw new Error(`single ${enabled ? 'enable' : 'disable'} answered ${response.status} (${JSON.stringify(body).slice(0, 200)})`);
  }
}

/** 1,000 single calls on 32 connections; the milliseconds they took. */
async function singles(service: Service, key: string, agentIds: readonly string[], enabled: boolean): Promise<number> {
  const started = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (next < agentIds.length) await single(service, key, agentIds[next++]!, enabled);
    }),
  );
  return performance.now() - started;
}

/** One batch of these changes; the milliseconds it took, every result checked. */
async function batch(service: Service, key: string, agentIds: readonly string[], enabled: boolean): Promise<number> {
  const started = performance.now();
  const response = await fetch(batchUrl(service), {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key },
    body: JSON.stringify({ changes: agentIds.map((agentId) => ({ agentId, enabled })) }),
  });
  const ms = performance.now() - started;
  const body = (await response.json()) as { results?: Array<{ status: number; body: { pausedCampaignCount?: number } }> };
  if (response.status !== 200) throw new Error(`batch answered ${response.status}: ${JSON.stringify(body).slice(0, 300)}`);
  const expected = enabled ? 0 : campaignsPerAgent;
  const wrong = body.results!.filter((result) => result.status !== 200 || result.body.pausedCampaignCount !== expected);
  if (wrong.length > 0) throw new Error(`${wrong.length} results of the batch not as expected, e.g. ${JSON.stringify(wrong[0])}`);
  return ms;
}

/**
 * Waits until the fresh process serves the partner routes: right after its start on a loaded
 * machine its event-loop delay can still be over the shedding threshold (a 503 that changes nothing).
 */
async function untilServed(service: Service, key: string, agentId: string): Promise<void> {
  for (let attempt = 0; attempt < 60; attempt += 1) {
    const response = await fetch(service.statusUrl.replace('/agents/status', `/agents/${agentId}/status`), {
      headers: { 'x-api-key': key },
    });
    await response.arrayBuffer();
    if (response.status !== 503) return;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  throw new Error('the bulk service kept shedding its first requests');
}

/** The median time of single disables of these agents, one after another. */
async function medianDisableMs(service: Service, key: string, agentIds: readonly string[]): Promise<number> {
  const times: number[] = [];
  for (const agentId of agentIds) {
    const started = performance.now();
    await single(service, key, agentId, false);
    times.push(performance.now() - started);
  }
  times.sort((x, y) => x - y);
  return Math.round(times[Math.floor(times.length / 2)]! * 10) / 10;
}

export async function bulkPhase(ctx: BenchContext): Promise<void> {
  const [a, b] = [ctx.disablers[3]!, ctx.disablers[4]!];
  const singleRounds: string[][] = [];
  const batchRounds: string[][] = [];
  for (let round = 0; round < rounds; round += 1) {
    singleRounds.push(await seedAgents(ctx, [a], agents, campaignsPerAgent));
    batchRounds.push(await seedAgents(ctx, [a], agents, campaignsPerAgent));
  }
  const besideAgents = await seedAgents(ctx, [a], agents, campaignsPerAgent);
  const [singleAgents, batchAgents] = [singleRounds[0]!, batchRounds[0]!];
  const others = await seedAgents(ctx, [b], 1 + 2 * otherSamples, campaignsPerAgent);
  // A deadline long enough for the single calls' slowest and the whole batch on a loaded machine:
  // the phase measures how long the work takes, not where a deadline cuts it.
  const service = await startService(ctx, 'bulk', { DISABLES_IN_FLIGHT_PER_NETWORK: '2000', REQUEST_DEADLINE_MS: '300000' });
  try {
    await resetSimulator(ctx);
    ctx.simulator.simulator.setMode('slow', { delayMs: spendDelayMs });
    await untilServed(service, a.key, singleAgents[0]!);
    // Warm-up: a small batch and a few single calls pay for code V8 has not optimised yet.
    const warm = await seedAgents(ctx, [a], 40, campaignsPerAgent);
    await batch(service, a.key, warm.slice(0, 20), false);
    await singles(service, a.key, warm.slice(20), false);
    await single(service, b.key, others[0]!, false);

    let calls = ctx.simulator.simulator.requests().length;
    const callsSince = () => {
      const now = ctx.simulator.simulator.requests().length;
      const made = now - calls;
      calls = now;
      return made;
    };
    const roundsMs: Array<{ singles: number; batch: number }> = [];
    let [singleDisableCalls, batchDisableCalls] = [0, 0];
    for (let round = 0; round < rounds; round += 1) {
      const singlesMs = Math.round(await singles(service, a.key, singleRounds[round]!, false));
      singleDisableCalls = Math.max(singleDisableCalls, callsSince());
      const batchMs = Math.round(await batch(service, a.key, batchRounds[round]!, false));
      batchDisableCalls = Math.max(batchDisableCalls, callsSince());
      roundsMs.push({ singles: singlesMs, batch: batchMs });
      console.log(`  bulk, round ${round + 1}: 1,000 single disables ${singlesMs} ms, 1,000 others in one batch ${batchMs} ms`);
    }
    const median = (values: number[]) => values.sort((x, y) => x - y)[Math.floor(values.length / 2)]!;
    const singleDisablesMs = median(roundsMs.map((one) => one.singles));
    const batchDisablesMs = median(roundsMs.map((one) => one.batch));
    const otherAloneMs = await medianDisableMs(service, b.key, others.slice(1, 1 + otherSamples));
    callsSince();
    // Awaited together: a batch that fails while the other network's disables are timed fails the
    // phase (whose finally stops the service), never the bench process as an unhandled rejection
    // that would leave its services running.
    const [batchBesideOtherMs, otherBesideBatchMs] = await Promise.all([
      batch(service, a.key, besideAgents, false),
      new Promise((resolve) => setTimeout(resolve, 100)).then(() => medianDisableMs(service, b.key, others.slice(1 + otherSamples))),
    ]);
    const batchBesideOtherCalls = callsSince() - otherSamples; // B's own calls
    const left = await activeUnpaused(ctx, [...singleRounds.flat(), ...batchRounds.flat(), ...besideAgents, ...others]);
    if (left !== 0) throw new Error(`${left} campaigns left unpaused`);

    ctx.simulator.simulator.setMode('ok');
    const singleEnablesMs = await singles(service, a.key, singleAgents, true);
    const batchEnablesMs = await batch(service, a.key, batchAgents, true);
    const figures: BulkFigures = {
      agents,
      campaignsPerAgent,
      spendDelayMs,
      singleDisablesMs,
      singleDisableCalls,
      batchDisablesMs,
      batchDisableCalls,
      roundsMs,
      singleEnablesPerSecond: Math.round((agents / singleEnablesMs) * 1000),
      batchEnablesPerSecond: Math.round((agents / batchEnablesMs) * 1000),
      otherAloneMs,
      otherBesideBatchMs,
      batchBesideOtherMs: Math.round(batchBesideOtherMs),
      batchBesideOtherCalls,
    };
    ctx.results.bulk = figures;
    console.log(
      `  bulk: 1,000 disables as single calls ${figures.singleDisablesMs} ms (${singleDisableCalls} calls), as one batch ${figures.batchDisablesMs} ms (${batchDisableCalls} calls, ${(figures.singleDisablesMs / figures.batchDisablesMs).toFixed(1)}x); enables ${figures.singleEnablesPerSecond}/s single, ${figures.batchEnablesPerSecond}/s in one batch (${(figures.batchEnablesPerSecond / figures.singleEnablesPerSecond).toFixed(1)}x); another network's disable alone ${otherAloneMs} ms, beside the second batch ${otherBesideBatchMs} ms (${(otherBesideBatchMs / otherAloneMs).toFixed(2)}x; that batch ${figures.batchBesideOtherMs} ms, ${batchBesideOtherCalls} calls)`,
    );
  } finally {
    ctx.simulator.simulator.setMode('ok');
    await stop(ctx, service);
  }
}
