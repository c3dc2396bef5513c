// Fairness (`--only=fairness`): network B's disable of one agent alone, and again 300 ms after
// network A started disabling 8 agents of 2,000 campaigns each, against a spend management that
// answers in 100 ms. B's batches fit in its fair share of the replica's slots, so only the wait for
// a slot should separate the two figures (docs/interfaces.md §10).
import type { BenchContext, Service } from '../context.js';
import { activeUnpaused, resetSimulator, seedAgents } from '../context.js';

const spendDelayMs = 100;

async function disable(service: Service, key: string, agentId: string, expected: number): Promise<number> {
  const started = performance.now();
  const response = await fetch(service.statusUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key },
    body: JSON.stringify({ agentId, enabled: false }),
  });
  const body = (await response.json()) as { pausedCampaignCount?: number };
  const ms = Math.round((performance.now() - started) * 10) / 10;
  if (response.status !== 200 || body.pausedCampaignCount !== expected) {
    throw new Error(`disable answered ${response.status} with pausedCampaignCount ${body.pausedCampaignCount} (expected ${expected})`);
  }
  return ms;
}

export async function fairness(ctx: BenchContext, service: Service): Promise<void> {
  const { quick } = ctx.options;
  const [a, b] = [ctx.disablers[1]!, ctx.disablers[2]!];
  const campaigns = 400;
  const loadAgents = 8;
  const loadCampaigns = quick ? 500 : 2_000;
  const [bWarmUp, bAlone, bBeside] = await seedAgents(ctx, [b], 3, campaigns);
  const aAgents = await seedAgents(ctx, [a], loadAgents, loadCampaigns);
  await resetSimulator(ctx);
  ctx.simulator.simulator.setMode('slow', { delayMs: spendDelayMs });
  try {
    // The first slow disable of a process pays for connections and code not warm yet.
    await disable(service, b.key, bWarmUp!, campaigns);
    const aloneMs = await disable(service, b.key, bAlone!, campaigns);
    // A's disables start at once, B's 300 ms later; all awaited together, so one that fails fails
    // the phase instead of crashing the bench as an unhandled rejection (see bulk.ts).
    const [besideLoadMs] = await Promise.all([
      new Promise((resolve) => setTimeout(resolve, 300)).then(() => disable(service, b.key, bBeside!, campaigns)),
      ...aAgents.map((agentId) => disable(service, a.key, agentId, loadCampaigns)),
    ]);
    const left = await activeUnpaused(ctx, [bWarmUp!, bAlone!, bBeside!, ...aAgents]);
    if (left !== 0) throw new Error(`${left} campaigns left unpaused`);
    ctx.results.fairness = { aloneMs, besideLoadMs, spendDelayMs, campaigns, loadAgents, loadCampaigns };
    console.log(
      `  fairness: B's disable of ${campaigns} alone ${aloneMs} ms, beside A's ${loadAgents} × ${loadCampaigns} ${besideLoadMs} ms (${(besideLoadMs / aloneMs).toFixed(2)}x)`,
    );
  } finally {
    ctx.simulator.simulator.setMode('ok');
  }
}
