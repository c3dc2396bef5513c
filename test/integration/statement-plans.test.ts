// A disable's statements must find an agent's campaigns by index whatever plan PostgreSQL picks.
// A named prepared statement is planned for its values five times, then possibly once for any
// values (a generic plan); with agents of 0 and of 10,000 campaigns side by side, a generic plan
// that expects thousands of rows per agent may read the whole campaigns table for an agent that has
// none (found by the benchmark: the finishing statement took 40 ms from its sixth run on). This
// file's database forces generic plans from the first run and counts sequential scans of campaigns.
// It also checks, on those plans, the one statement whose result depends on what else is in the
// table: the last batch's mark, which finishes the run only when no other campaign is left.
import { randomUUID } from 'node:crypto';
import { type DatabasePool, sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createMetrics } from '../../src/observability/metrics.js';
import { type AgentRepository, createAgentRepository, type DisableOutcome } from '../../src/stores/agent-repository.js';
import { createDisableQueue, type DisableQueue } from '../../src/stores/disable-queue.js';
import { createDatabasePool } from '../../src/stores/postgres.js';
import { testDatabase } from '../support/data.js';
import { genericPlansBesideSkew, scansOf } from '../support/generic-plans.js';

const db = testDatabase();
let pool: DatabasePool;
let agents: AgentRepository;
let queue: DisableQueue;
let networkId: string;

/** The campaigns table's scan counters. */
const campaignScans = () => scansOf(pool, 'campaigns');

beforeAll(async () => {
  networkId = await db.network();
  const url = await genericPlansBesideSkew(db, networkId);
  // One connection, opened after the setting: every statement below runs on it, with generic plans.
  pool = await createDatabasePool({ url: url.toString(), maxPoolSize: 1, statementTimeoutMs: 5_000 });
  agents = createAgentRepository(pool, createMetrics());
  queue = createDisableQueue(pool, createMetrics());
});

/** The disable statement with a claim of this test's own (batch size 100, plus one). */
async function disable(agentId: string) {
  const claimToken = randomUUID();
  const lease = { claimToken, owner: 'plans-test', leaseMs: 30_000 };
  const author = { partnerName: 'plans', requestId: undefined };
  const outcome = (await agents.disable(networkId, agentId, author, { ...lease, traceParent: null }, 101)) as DisableOutcome | undefined;
  return { claimToken, lease, outcome };
}

afterAll(async () => {
  await pool?.end();
  await db.close();
});

describe('statement plans under skew (generic plans forced)', () => {
  it('runs generic plans on the service pool connection', async () => {
    expect(await pool.oneFirst(sql.type(z.object({ plan_cache_mode: z.string() }))`SHOW plan_cache_mode`)).toBe('force_generic_plan');
  });

  it('disables agents with few or no campaigns without a sequential scan of campaigns', async () => {
    const before = await campaignScans();
    for (const campaigns of [0, 0, 2]) {
      const agentId = await db.agent(networkId);
      if (campaigns > 0) await db.campaigns(agentId, campaigns);
      const { claimToken, lease, outcome } = await disable(agentId);
      expect(outcome?.claimed).toBe(true);
      expect(outcome?.firstBatch).toHaveLength(campaigns);
      expect(await agents.nextBatch(agentId, null, 101)).toEqual(outcome?.firstBatch);
      expect(await queue.finish(agentId, claimToken)).toBe(campaigns === 0);
      if (campaigns > 0) {
        expect(await agents.markPaused(agentId, outcome?.firstBatch ?? [], lease, true)).toEqual({
          moved: campaigns,
          skipped: [],
          finished: true,
        });
      }
    }
    const after = await campaignScans();
    expect(after.idx_scan).toBeGreaterThan(before.idx_scan); // the counters did move: the check can fail
    expect(after.seq_scan - before.seq_scan).toBe(0);
  });
});

describe("the last batch's statement finishes the run only when nothing is left (plans generic, as above)", () => {
  const pending = async (agentId: string) =>
    (await db.pool.query('SELECT 1 FROM pending_disables WHERE agent_id = $1', [agentId])).rowCount === 1;

  it('leaves the pending row while any other campaign is unpaused, before or after the batch in campaign order, or the claim is not ours', async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 4);
    const { lease, outcome } = await disable(agentId);
    const [first, second, third, fourth] = outcome!.firstBatch;
    const notOurs = { ...lease, claimToken: randomUUID() };
    // The middle two: one unpaused campaign sorts before them, one after.
    expect(await agents.markPaused(agentId, [second!, third!], lease, true)).toEqual({ moved: 2, skipped: [], finished: false });
    // Not our claim: moved, but the row stays.
    expect(await agents.markPaused(agentId, [first!, fourth!], notOurs, true)).toEqual({ moved: 2, skipped: [], finished: false });
    expect(await pending(agentId)).toBe(true);
    // Nothing moved and nothing left: the right claim finishes.
    expect(await agents.markPaused(agentId, [first!], lease, true)).toEqual({ moved: 0, skipped: [], finished: true });
    expect(await pending(agentId)).toBe(false);
  });

  it('finishes in the same statement when the batch holds every unpaused campaign', async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 3);
    await db.campaigns(agentId, 2, { paused: true });
    await db.campaigns(agentId, 2, { active: false });
    const { lease, outcome } = await disable(agentId);
    expect(outcome?.firstBatch).toHaveLength(3);
    expect(await agents.markPaused(agentId, outcome!.firstBatch, lease, true)).toEqual({ moved: 3, skipped: [], finished: true });
    expect(await pending(agentId)).toBe(false);
    expect((await db.pausedIds(agentId)).size).toBe(5);
  });
});

describe('the status history reads by index on generic plans (docs/interfaces.md §11)', () => {
  it('pages an agent with thousands of changes beside agents with none without a sequential scan', async () => {
    const busy = await db.agent(networkId);
    await db.pool.query(
      `INSERT INTO agent_status_changes (agent_id, network_id, enabled, partner_name)
       SELECT $1, $2::uuid, i % 2 = 0, 'plans' FROM generate_series(1, 5000) i`,
      [busy, networkId],
    );
    await db.pool.query('ANALYZE agent_status_changes');
    const counters = () => scansOf(pool, 'agent_status_changes');
    const before = await counters();
    let cursor: string | null = null;
    for (let page = 0; page < 3; page += 1) {
      const rows = await agents.statusChanges(networkId, busy, cursor, 21);
      expect(rows).toHaveLength(21);
      cursor = rows![19]!.changeId;
    }
    expect(await agents.statusChanges(networkId, await db.agent(networkId), null, 21)).toEqual([]);
    const after = await counters();
    expect(after.idx_scan).toBeGreaterThan(before.idx_scan);
    expect(after.seq_scan - before.seq_scan).toBe(0);
  });
});
