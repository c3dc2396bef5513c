// The 429 path (`--only=429`): a network over its limit, in a service process whose limit is 1 a window.
import type { BenchContext } from '../context.js';
import { startService, stop } from '../context.js';
import { measure, statusPosts } from '../load.js';

export async function overTheLimit(ctx: BenchContext): Promise<void> {
  const { limited, limitedAgents } = ctx;
  const service = await startService(ctx, 'limited', { RATE_LIMIT_MAX: '1', RATE_LIMIT_WINDOW_MS: '600000' });
  const post = () =>
    fetch(service.statusUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': limited.key },
      body: JSON.stringify({ agentId: limitedAgents[0], enabled: true }),
    });
  await (await post()).arrayBuffer(); // spends the window's one request (or is already over it)
  const over = await post();
  const problem = (await over.json()) as { type?: string };
  const missing = ['retry-after', 'ratelimit', 'ratelimit-policy'].filter((name) => !over.headers.has(name));
  if (over.status !== 429 || problem.type !== 'urn:partner-agent-status:problem:rate-limited' || missing.length > 0) {
    throw new Error(
      `a network over its limit got ${[over.status, problem.type].filter(Boolean).join(' ')}${missing.length ? `, without ${missing.join(', ')}` : ''}`,
    );
  }
  const result = await measure(
    '429 path (network over its limit)',
    statusPosts(service.statusUrl, [limited.key], limitedAgents, true),
    ctx.options.loadPlan,
    429,
  );
  ctx.results.failures.push(...result.problems);
  ctx.results.loads['429 path'] = result.figure;
  await stop(ctx, service);
}
