// Disables under load (`--only=concurrent`): throughput of disables spread over the disabling
// networks, each answer checked for its count and every campaign checked paused afterwards.
import type { BenchContext, Service } from '../context.js';
import { activeUnpaused, resetSimulator, seedAgents } from '../context.js';
import { measure } from '../load.js';

const campaignsPerConcurrentAgent = 10;

export async function disablesUnderLoad(ctx: BenchContext, service: Service): Promise<void> {
  const { disablers, options, results, simulator } = ctx;
  const { plan } = options;
  const spare = 2 * plan.connections; // never needed; guards against a request built but not sent
  const warmupAgents = await seedAgents(ctx, disablers, plan.concurrentWarmupAgents + spare, campaignsPerConcurrentAgent);
  const agents = await seedAgents(ctx, disablers, plan.concurrentAgents + spare, campaignsPerConcurrentAgent);
  const keyOf = new Map(disablers.map((p) => [p.networkId, p.key]));
  const networkOf = (i: number) => disablers[i % disablers.length]!.networkId;
  const run = async (name: string, agentIds: string[], amount: number) => {
    let next = 0;
    const confirmed = new Set<string>();
    let wrongCounts = 0;
    const result = await measure(
      name,
      {
        url: service.statusUrl,
        method: 'POST',
        amount,
        requests: [
          {
            setupRequest: (request) => {
              const n = next++;
              return {
                ...request,
                headers: { 'content-type': 'application/json', 'x-api-key': keyOf.get(networkOf(n))! },
                body: JSON.stringify({ agentId: agentIds[n], enabled: false }),
              };
            },
            onResponse: (status, body) => {
              if (status !== 200) return;
              const answer = JSON.parse(body) as { agentId: string; pausedCampaignCount: number };
              if (answer.pausedCampaignCount === campaignsPerConcurrentAgent) confirmed.add(answer.agentId);
              else wrongCounts += 1;
            },
          },
        ],
      },
      options.loadPlan,
    );
    results.failures.push(...result.problems);
    const requested = agentIds.slice(0, amount);
    const left = await activeUnpaused(ctx, requested);
    if (wrongCounts > 0 || confirmed.size !== amount || left !== 0) {
      results.failures.push(
        `${name}: ${confirmed.size} of ${amount} disables confirmed ${campaignsPerConcurrentAgent} campaigns (${wrongCounts} other counts), ${left} campaigns left unpaused`,
      );
    }
    return result.figure;
  };
  await run('disables under load (warm-up)', warmupAgents, plan.concurrentWarmupAgents);
  await resetSimulator(ctx);
  const figure = await run('disables under load', agents, plan.concurrentAgents);
  results.concurrent = {
    ...figure,
    agents: plan.concurrentAgents,
    campaignsPerAgent: campaignsPerConcurrentAgent,
    spendManagementCalls: simulator.simulator.requests().length,
  };
  results.loads['disables under load'] = figure;
}
