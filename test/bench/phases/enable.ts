// The enable: throughput and latency of the service's enable under load (`--only=enable`), and the
// check shared with the floor and the traced service that every answered enable did the whole work.
import { randomUUID } from 'node:crypto';
import type { BenchContext, Service } from '../context.js';
import { phase } from '../context.js';
import { measure, statusPosts } from '../load.js';

/**
 * Enables under load, checked to do the whole work: every 200 appended one change row (docs/interfaces.md
 * §9), so the service and the floor are compared on the same writes.
 */
export async function measureEnable(
  ctx: BenchContext,
  figure: string,
  url: string,
  options: { idempotencyKeys?: boolean } = {},
): Promise<void> {
  const { db, main, enableAgents, results } = ctx;
  const changeRows = async () =>
    (await db.query("SELECT count(*)::int AS n FROM agent_status_changes WHERE partner_name = 'bench' AND enabled")).rows[0].n as number;
  const before = await changeRows();
  // A new Idempotency-Key on every request: each one claims a key and keeps its answer.
  const keys = options.idempotencyKeys ? () => ({ 'idempotency-key': randomUUID() }) : undefined;
  const result = await measure(figure, statusPosts(url, [main.key], enableAgents, true, keys), ctx.options.enablePlan);
  const appended = (await changeRows()) - before;
  results.failures.push(...result.problems);
  // A load stops with up to one request per connection sent but not answered: the warm-up's and
  // the measurement's may have appended rows without a counted 200.
  const unanswered = 2 * ctx.options.plan.connections;
  if (appended < result.answeredAsExpected || appended > result.answeredAsExpected + unanswered) {
    results.failures.push(`${figure}: ${result.answeredAsExpected} answers 200 but ${appended} change rows appended`);
  }
  results.loads[figure] = result.figure;
}

/** One enable before the load: it must pass the rate limit (limit on: the RateLimit fields are there). */
export async function checkRateLimitIsOn(ctx: BenchContext, statusUrl: string): Promise<void> {
  const enable = async () => {
    const answer = await fetch(statusUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': ctx.main.key },
      body: JSON.stringify({ agentId: ctx.enableAgents[0], enabled: true }),
    });
    await answer.arrayBuffer();
    return answer;
  };
  // A replica just started on a busy machine (a CI runner beside another test suite) may shed the
  // first requests (503, Retry-After): asked again after the wait it names, up to 10 times.
  let response = await enable();
  for (let shed = 0; response.status === 503 && shed < 10; shed += 1) {
    await new Promise((resolve) => setTimeout(resolve, Number(response.headers.get('retry-after') ?? 1) * 1_000));
    response = await enable();
  }
  if (response.status !== 200 || !response.headers.has('ratelimit-policy')) {
    throw new Error(
      `an enable answered ${response.status}${response.headers.has('ratelimit-policy') ? '' : ' without RateLimit-Policy: the rate limit is not on'}`,
    );
  }
}

/** The service's enable (tracing off), right after the floors. */
export async function enablePhase(ctx: BenchContext, service: Service): Promise<void> {
  await phase(ctx, 'enable', async () => {
    await checkRateLimitIsOn(ctx, service.statusUrl);
    await measureEnable(ctx, 'enable', service.statusUrl);
  });
}

/**
 * What an Idempotency-Key costs the enable (`--only=idempotency`): the enable without one (unless
 * this run measured it already) and right after it the enable with a new key on every request.
 */
export async function idempotencyPhase(ctx: BenchContext, service: Service): Promise<void> {
  await phase(ctx, 'enable with Idempotency-Key', async () => {
    if (!ctx.results.loads.enable) {
      await checkRateLimitIsOn(ctx, service.statusUrl);
      await measureEnable(ctx, 'enable', service.statusUrl);
    }
    await measureEnable(ctx, 'enable, Idempotency-Key', service.statusUrl, { idempotencyKeys: true });
  });
}
