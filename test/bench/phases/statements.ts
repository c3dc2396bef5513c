// What an unnamed statement (DATABASE_POOLER=transaction, docs/interfaces.md §13) costs against a
// named prepared one, statement by statement: the service's own repositories on two one-connection
// pools, straight to PostgreSQL, run in alternating chunks from this process so that the machine's
// other work weighs on both alike. Only the statements differ: the unnamed one is parsed and planned
// on every execution.
import { createMetrics } from '../../../src/observability/metrics.js';
import { type AgentRepository, createAgentRepository } from '../../../src/stores/agent-repository.js';
import { createDatabasePool } from '../../../src/stores/postgres.js';
import { statementsFor } from '../../../src/stores/statements.js';
import { type BenchContext, seedAgents } from '../context.js';

export interface StatementCost {
  operation: string;
  namedUs: number;
  unnamedUs: number;
  executions: number;
}

export async function statementCosts(ctx: BenchContext): Promise<void> {
  const chunk = ctx.options.quick ? 50 : 200;
  const rounds = ctx.options.quick ? 2 : 10;
  const agents = await seedAgents(ctx, [ctx.main], 50, 20);
  const pools = await Promise.all(
    (['none', 'transaction'] as const).map((pooler) =>
      createDatabasePool({ url: ctx.databaseUrl, maxPoolSize: 1, statementTimeoutMs: 5_000, pooler }),
    ),
  );
  const [named, unnamed] = pools.map((pool, i) => createAgentRepository(pool!, createMetrics(), statementsFor(i ? 'transaction' : 'none')));
  const author = { partnerName: 'bench-statements', requestId: undefined };
  const agent = (i: number) => agents[i % agents.length]!;
  const operations: Record<string, (repository: AgentRepository, i: number) => Promise<unknown>> = {
    read_agent_status: (repository, i) => repository.readStatus(ctx.main.networkId, agent(i)),
    enable_agent: (repository, i) => repository.enable(ctx.main.networkId, agent(i), author),
    next_campaign_batch: (repository, i) => repository.nextBatch(agent(i), null, 100),
  };
  try {
    for (const [operation, run] of Object.entries(operations)) {
      const sequential = async (repository: AgentRepository) => {
        const started = performance.now();
        for (let i = 0; i < chunk; i += 1) await run(repository, i);
        return performance.now() - started;
      };
      await sequential(named!);
      await sequential(unnamed!);
      const total = { named: 0, unnamed: 0 };
      for (let round = 0; round < rounds; round += 1) {
        // Alternating which goes first, so neither always follows the other.
        const order = round % 2 === 0 ? (['named', 'unnamed'] as const) : (['unnamed', 'named'] as const);
        for (const kind of order) total[kind] += await sequential(kind === 'named' ? named! : unnamed!);
      }
      const executions = chunk * rounds;
      const perStatement = (ms: number) => Math.round((ms * 1_000) / executions);
      const cost = { operation, namedUs: perStatement(total.named), unnamedUs: perStatement(total.unnamed), executions };
      ctx.results.statements.push(cost);
      console.log(`  ${operation}: named ${cost.namedUs} µs, unnamed ${cost.unnamedUs} µs a statement (${executions} each)`);
    }
  } finally {
    await Promise.all(pools.map((pool) => pool.end()));
  }
}
