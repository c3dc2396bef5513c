// The 401 path (`--only=401`): a flood of unknown keys against the service, beside the bare floor.
import type { BenchContext, Service } from '../context.js';
import { measure, statusPosts } from '../load.js';

export async function unknownKeys(ctx: BenchContext, service: Service): Promise<void> {
  const result = await measure(
    '401 path (unknown keys)',
    statusPosts(service.statusUrl, ctx.badKeys, ctx.enableAgents, true),
    ctx.options.loadPlan,
    401,
  );
  ctx.results.failures.push(...result.problems);
  ctx.results.loads['401 path'] = result.figure;
}
