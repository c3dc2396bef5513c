// The benchmark's command line (`--quick`, `--only=<phases>`), BENCH_SERVICE_FLAGS, and the plan
// of loads that follows from them.
import type { LoadPlan } from './load.js';

export const phases = [
  'floors',
  'enable',
  'idempotency',
  'tracing',
  '401',
  'flood',
  'prefer',
  'openapi',
  '429',
  'disables',
  'cluster',
  'pooler',
  'fairness',
  'concurrent',
  'statements',
  'events',
  'webhooks',
  'webhook-isolation',
  'bulk',
  'feed',
] as const;
export type Phase = (typeof phases)[number];

export interface Plan {
  connections: number;
  warmupSeconds: number;
  seconds: number;
  enableSeconds: number;
  campaignCounts: number[];
  runs: number;
  concurrentAgents: number;
  concurrentWarmupAgents: number;
}

export interface Options {
  /** A second or two per figure and small campaign counts, no targets judged (CI). */
  quick: boolean;
  /** `--only=`: the phases to run; undefined runs them all. */
  only: Set<string> | undefined;
  /** BENCH_SERVICE_FLAGS: Node flags added to the service processes. */
  serviceFlags: string[];
  /**
   * How the service processes reach PostgreSQL: BENCH_DATABASE_POOLER (their DATABASE_POOLER,
   * default none) and BENCH_DATABASE_HOST (host:port their DATABASE_URL names instead of the admin
   * URL's, e.g. a PgBouncer whose `*` entry forwards every database). Seeding and checks stay direct.
   */
  database: { pooler: string; host: string | undefined };
  plan: Plan;
  loadPlan: LoadPlan;
  enablePlan: LoadPlan;
}

/** Reads the options; an unknown phase in `--only` throws before anything is started. */
export function parseOptions(argv: readonly string[], env: NodeJS.ProcessEnv): Options {
  const onlyArgument = argv.find((argument) => argument.startsWith('--only='));
  const only = onlyArgument ? new Set(onlyArgument.slice('--only='.length).split(',')) : undefined;
  for (const name of only ?? []) {
    if (!(phases as readonly string[]).includes(name)) throw new Error(`--only: unknown phase ${name} (phases: ${phases.join(', ')})`);
  }
  const quick = argv.includes('--quick');
  const plan: Plan = quick
    ? {
        connections: 32,
        warmupSeconds: 0.5,
        seconds: 1.5,
        enableSeconds: 1.5,
        campaignCounts: [0, 100, 1_000],
        runs: 1,
        concurrentAgents: 200,
        concurrentWarmupAgents: 32,
      }
    : {
        connections: 32,
        warmupSeconds: 2,
        seconds: 5,
        enableSeconds: 10,
        campaignCounts: [0, 100, 1_000, 10_000],
        runs: 5,
        concurrentAgents: 2_000,
        concurrentWarmupAgents: 200,
      };
  const loadPlan: LoadPlan = { connections: plan.connections, warmupSeconds: plan.warmupSeconds, seconds: plan.seconds };
  return {
    quick,
    only,
    serviceFlags: (env.BENCH_SERVICE_FLAGS ?? '').split(/\s+/).filter(Boolean),
    database: { pooler: env.BENCH_DATABASE_POOLER?.trim() || 'none', host: env.BENCH_DATABASE_HOST?.trim() || undefined },
    plan,
    loadPlan,
    enablePlan: { ...loadPlan, seconds: plan.enableSeconds },
  };
}

export function isSelected(options: Options, name: Phase): boolean {
  return !options.only || options.only.has(name);
}
