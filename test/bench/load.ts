// The load generator: autocannon in this process (pinned to core 1), a warm-up before every
// measurement, and a strict check of what came back: every answer must have the expected status
// and no request may fail or time out, in the warm-up as in the measurement.
import autocannon from 'autocannon';

/** The `p`th percentile of ascending `sorted` (nearest rank); 0 when there is none. */
export function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? 0;
}

export interface LoadFigure {
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  requests: number;
  seconds: number;
  statusCounts: Record<string, number>;
  errors: number;
  timeouts: number;
}

export interface LoadPlan {
  connections: number;
  warmupSeconds: number;
  seconds: number;
}

/** What autocannon saw, as a figure; any unexpected status, error or time-out is returned as a problem. */
function summarise(
  name: string,
  result: autocannon.Result,
  expectStatus: number,
  measuredSeconds?: number,
): { figure: LoadFigure; problems: string[] } {
  const statusCounts = Object.fromEntries(
    Object.entries(result.statusCodeStats as Record<string, { count: number }>).map(([status, { count }]) => [status, count]),
  );
  const problems: string[] = [];
  const unexpected = Object.entries(statusCounts).filter(([status]) => Number(status) !== expectStatus);
  if (unexpected.length > 0) {
    problems.push(`${name}: expected only ${expectStatus}, got ${unexpected.map(([status, count]) => `${count}× ${status}`).join(', ')}`);
  }
  if (result.errors > 0 || result.timeouts > 0) problems.push(`${name}: ${result.errors} errors (${result.timeouts} time-outs)`);
  if (result.requests.total === 0) problems.push(`${name}: no request completed`);
  const seconds = measuredSeconds ?? result.duration;
  return {
    figure: {
      requestsPerSecond: Math.round(result.requests.total / seconds),
      p50Ms: result.latency.p50,
      p99Ms: result.latency.p99,
      requests: result.requests.total,
      seconds: Math.round(seconds * 100) / 100,
      statusCounts,
      errors: result.errors,
      timeouts: result.timeouts,
    },
    problems,
  };
}

/**
 * A warm-up of `plan.warmupSeconds`, then `plan.seconds` measured, with the same requests; `amount`
 * instead runs a fixed number of requests (then the warm-up is the caller's business).
 */
export async function measure(
  name: string,
  options: autocannon.Options,
  plan: LoadPlan,
  expectStatus = 200,
): Promise<{ figure: LoadFigure; problems: string[]; answeredAsExpected: number }> {
  const problems: string[] = [];
  let answeredAsExpected = 0;
  if (options.amount === undefined && plan.warmupSeconds > 0) {
    const warmup = summarise(
      `${name} (warm-up)`,
      await autocannon({ connections: plan.connections, ...options, duration: plan.warmupSeconds }),
      expectStatus,
    );
    problems.push(...warmup.problems);
    answeredAsExpected += warmup.figure.statusCounts[expectStatus] ?? 0;
  }
  // autocannon notices the end of a fixed amount only at its next one-second tick, so the time of
  // such a run is taken here, from the start to the last answer.
  const started = performance.now();
  let lastAnswer = started;
  const instance = autocannon({
    connections: plan.connections,
    ...(options.amount === undefined ? { duration: plan.seconds } : {}),
    ...options,
  }) as unknown as autocannon.Instance & PromiseLike<autocannon.Result>;
  if (options.amount !== undefined) instance.on('response', () => (lastAnswer = performance.now()));
  const run = await instance;
  const summary = summarise(name, run, expectStatus, options.amount === undefined ? undefined : (lastAnswer - started) / 1000);
  problems.push(...summary.problems);
  const { figure } = summary;
  answeredAsExpected += figure.statusCounts[expectStatus] ?? 0;
  console.log(`  ${name}: ${figure.requestsPerSecond} req/s, p50 ${figure.p50Ms} ms, p99 ${figure.p99Ms} ms (${figure.requests} requests)`);
  for (const problem of problems) console.log(`  FAILED ${problem}`);
  return { figure, problems, answeredAsExpected };
}

/** POSTs of `{agentId, enabled}` to `url`, cycling through `agentIds`; `extraHeaders` adds headers of each request's own. */
export function statusPosts(
  url: string,
  apiKeys: readonly string[],
  agentIds: readonly string[],
  enabled: boolean,
  extraHeaders?: () => Record<string, string>,
): autocannon.Options {
  let next = 0;
  return {
    url,
    method: 'POST',
    requests: [
      {
        setupRequest: (request) => {
          const n = next++;
          return {
            ...request,
            headers: { 'content-type': 'application/json', 'x-api-key': apiKeys[n % apiKeys.length]!, ...extraHeaders?.() },
            body: JSON.stringify({ agentId: agentIds[n % agentIds.length], enabled }),
          };
        },
      },
    ],
  };
}
