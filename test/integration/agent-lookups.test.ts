// The change statements find their agents, and the marks their campaigns, by index whatever the
// size of the network. A named prepared statement is planned for its values at first, and
// PostgreSQL keeps doing so while those plans look cheaper than one for any values. Planned for 100
// agents of a network of 20,000, the statement of a batch's disables joined its agents to the ids
// as rows: three hash joins, each reading the network's whole agents table (found by the
// benchmark, where recording statements were half again as slow as with the index); planned for
// 100 finishing runs, the batch mark read the whole campaigns table to learn what each agent had
// left. This file's database plans every statement for its values, and the tables' scan counters
// tell an index read from a sequential one.
import { randomUUID } from 'node:crypto';
import { type DatabasePool, sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createMetrics } from '../../src/observability/metrics.js';
import { type AgentBatchStatements, createAgentBatchStatements } from '../../src/stores/agent-batches.js';
import { type AgentRepository, createAgentRepository } from '../../src/stores/agent-repository.js';
import { createDatabasePool } from '../../src/stores/postgres.js';
import { statementsFor } from '../../src/stores/statements.js';
import { testDatabase } from '../support/data.js';
import { databaseUrl } from '../support/database-url.js';
import { scansOf } from '../support/generic-plans.js';

const db = testDatabase();
let pool: DatabasePool;
let agents: AgentRepository;
let batches: AgentBatchStatements;
let networkId: string;

/** Agents of the network, beside which the statements below work on a few. */
const networkSize = 20_000;
const author = { partnerName: 'lookups', requestId: undefined };
const lease = () => ({ claimToken: randomUUID(), owner: 'lookups-test', leaseMs: 30_000, traceParent: null });
const agentScans = () => scansOf(pool, 'agents');
const campaignScans = () => scansOf(pool, 'campaigns');

beforeAll(async () => {
  networkId = await db.network();
  const url = new URL(databaseUrl());
  await db.pool.query(`ALTER DATABASE ${url.pathname.slice(1)} SET plan_cache_mode = force_custom_plan`);
  await db.pool.query(
    `INSERT INTO agents (agent_id, network_id) SELECT 'lookups:' || i, $1::uuid FROM generate_series(1, ${networkSize}) i`,
    [networkId],
  );
  await db.pool.query(
    `INSERT INTO campaigns (campaign_id, agent_id) SELECT gen_random_uuid(), 'lookups:' || (i % ${networkSize} + 1)
     FROM generate_series(1, ${networkSize * 3}) i`,
  );
  await db.pool.query('ANALYZE agents, campaigns');
  // One connection, opened after the setting: every statement below runs on it, planned for its values.
  pool = await createDatabasePool({ url: url.toString(), maxPoolSize: 1, statementTimeoutMs: 10_000 });
  agents = createAgentRepository(pool, createMetrics(), statementsFor('none'));
  batches = createAgentBatchStatements(pool, createMetrics(), statementsFor('none'), 'urn:test:lookups');
});

afterAll(async () => {
  await pool?.end();
  await db.close();
});

/** `count` agents of the network from the `from`th on. */
const agentIds = (from: number, count: number) => Array.from({ length: count }, (_, i) => `lookups:${from + i}`);

/** Runs `work` and returns the agents table's sequential and index scans it made. */
async function scansDuring(work: () => Promise<unknown>) {
  const before = await agentScans();
  await work();
  const after = await agentScans();
  return { seq: after.seq_scan - before.seq_scan, idx: after.idx_scan - before.idx_scan };
}

describe('agent lookups in a network of 20,000 agents, statements planned for their values', () => {
  it('runs plans made for the values on the service pool connection', async () => {
    expect(await pool.oneFirst(sql.type(z.object({ plan_cache_mode: z.string() }))`SHOW plan_cache_mode`)).toBe('force_custom_plan');
  });

  it('records the disables of 100 agents in one statement by index, every one flagged and claimed', async () => {
    const ids = agentIds(1, 100);
    let recorded: Awaited<ReturnType<AgentBatchStatements['disableMany']>> | undefined;
    const scans = await scansDuring(async () => {
      recorded = await batches.disableMany(
        networkId,
        ids.map((agentId) => ({ agentId, claimToken: randomUUID(), traceParent: null })),
        author,
        { owner: 'lookups-test', leaseMs: 30_000 },
        101,
      );
    });
    expect(scans.seq).toBe(0);
    expect(scans.idx).toBeGreaterThan(0);
    expect([...recorded!.values()].filter((one) => one.flagged && one.claimed)).toHaveLength(100);
    expect(await db.agentApproved(ids[0]!)).toBe(false);
  });

  it('records a single disable by index', async () => {
    const [agentId] = agentIds(500, 1);
    const scans = await scansDuring(() => agents.disable(networkId, agentId!, author, lease(), 101));
    expect(scans.seq).toBe(0);
    expect(await db.agentApproved(agentId!)).toBe(false);
  });

  it("marks 100 runs' campaigns in one statement, finishing each, without reading agents or campaigns whole", async () => {
    const ids = agentIds(1_001, 100);
    const claims = new Map(ids.map((agentId) => [agentId, randomUUID()]));
    const recorded = await batches.disableMany(
      networkId,
      ids.map((agentId) => ({ agentId, claimToken: claims.get(agentId)!, traceParent: null })),
      author,
      { owner: 'lookups-test', leaseMs: 30_000 },
      101,
    );
    const marks = ids.map((agentId) => ({
      agentId,
      campaignIds: recorded.get(agentId)!.firstBatch,
      claim: { claimToken: claims.get(agentId)!, owner: 'lookups-test', leaseMs: 30_000 },
      finish: true,
      settledCalls: [],
    }));
    expect(marks.every((mark) => mark.campaignIds.length === 3)).toBe(true);
    const before = await campaignScans();
    let marked: Awaited<ReturnType<AgentBatchStatements['markPausedMany']>> | undefined;
    const scans = await scansDuring(async () => {
      marked = await batches.markPausedMany(marks);
    });
    const after = await campaignScans();
    expect({ agents: scans.seq, campaigns: after.seq_scan - before.seq_scan }).toEqual({ agents: 0, campaigns: 0 });
    expect([...marked!.values()].filter((one) => one.finished && one.moved === 3)).toHaveLength(100);
  });

  it('enables 100 agents in one statement by index', async () => {
    const ids = agentIds(1, 100);
    let made: Awaited<ReturnType<AgentBatchStatements['enableMany']>> | undefined;
    const scans = await scansDuring(async () => {
      made = await batches.enableMany(networkId, ids, author);
    });
    expect(scans.seq).toBe(0);
    expect([...made!.values()].filter((one) => one !== 'locked')).toHaveLength(100);
    expect(await db.agentApproved(ids[99]!)).toBe(true);
  });
});
