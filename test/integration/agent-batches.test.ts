// The statements of a bulk change that serve many agents at once (src/stores/agent-batches.ts),
// against the run's PostgreSQL: each agent gets what its single statement gives it, an agent row or
// campaign row another transaction holds holds back no other agent, every batch statement takes its
// agents' change locks in agent order (so two of them never wait for each other in a cycle), and, on generic plans beside a big agent, no
// statement reads the campaigns table sequentially.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { DatabasePool } from 'slonik';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createMetrics } from '../../src/observability/metrics.js';
import { type AgentBatchStatements, createAgentBatchStatements } from '../../src/stores/agent-batches.js';
import { type AgentRepository, createAgentRepository, type DisableOutcome } from '../../src/stores/agent-repository.js';
import { createDatabasePool } from '../../src/stores/postgres.js';
import { statementsFor } from '../../src/stores/statements.js';
import { testDatabase } from '../support/data.js';
import { databaseUrl } from '../support/database-url.js';
import { genericPlansBesideSkew, scansOf } from '../support/generic-plans.js';

const db = testDatabase();
let pool: DatabasePool;
let agents: AgentRepository;
let batches: AgentBatchStatements;
let networkId: string;
let otherNetworkId: string;

const author = { partnerName: 'batches', requestId: 'batch-request' };
const leaseOf = () => ({ claimToken: randomUUID(), owner: 'batches-test', leaseMs: 30_000 });
const campaignScans = () => scansOf(pool, 'campaigns');

beforeAll(async () => {
  networkId = await db.network();
  otherNetworkId = await db.network();
  const url = await genericPlansBesideSkew(db, networkId);
  pool = await createDatabasePool({ url: url.toString(), maxPoolSize: 4, statementTimeoutMs: 10_000 });
  agents = createAgentRepository(pool, createMetrics(), statementsFor('none'));
  batches = createAgentBatchStatements(pool, createMetrics(), statementsFor('none'), 'urn:test:batches');
});

afterAll(async () => {
  await pool?.end();
  await db.close();
});

/** An agent of the network with `campaigns` active, unpaused campaigns. */
async function agentWith(campaigns: number, network = networkId): Promise<string> {
  const agentId = await db.agent(network);
  if (campaigns > 0) await db.campaigns(agentId, campaigns);
  return agentId;
}

/** What a disable's outcome says, without the change id (each statement's own). */
const shapeOf = (outcome: DisableOutcome | undefined) =>
  outcome && { claimed: outcome.claimed, flagged: outcome.flagged, firstBatch: outcome.firstBatch.length, unpaused: outcome.unpaused };

describe('disables of many agents in one statement', () => {
  it('records each agent as the single statement does, and nothing for an agent of another network or of none', async () => {
    const before = await campaignScans();
    // Twins: one of each pair through the single statement, the other through the batch one.
    const cases = [12, 0, 3];
    const singles = await Promise.all(cases.map((n) => agentWith(n)));
    const twins = await Promise.all(cases.map((n) => agentWith(n)));
    const heldSingle = await agentWith(4);
    const heldTwin = await agentWith(4);
    const foreign = await agentWith(2, otherNetworkId);
    const holds = [await db.holdAgentRow(heldSingle), await db.holdAgentRow(heldTwin)];
    try {
      const single = [];
      for (const agentId of [...singles, heldSingle]) {
        single.push(shapeOf((await agents.disable(networkId, agentId, author, { ...leaseOf(), traceParent: null }, 11)) as DisableOutcome));
      }
      const batched = await batches.disableMany(
        networkId,
        [...twins, heldTwin, foreign, 'no-such-agent'].map((agentId) => ({ agentId, claimToken: randomUUID(), traceParent: null })),
        author,
        { owner: 'batches-test', leaseMs: 30_000 },
        11,
      );
      expect([...batched.keys()].sort()).toEqual([...twins, heldTwin].sort());
      expect([...twins, heldTwin].map((agentId) => shapeOf(batched.get(agentId)))).toEqual(single);
      // The held agent: recorded and claimed, not flagged (its run sets the flag once the row is free).
      expect(shapeOf(batched.get(heldTwin))).toEqual({ claimed: true, flagged: false, firstBatch: 0, unpaused: 4 });
      expect(shapeOf(batched.get(twins[0]!))).toEqual({ claimed: true, flagged: true, firstBatch: 11, unpaused: 12 });
    } finally {
      for (const hold of holds) await hold.end();
    }
    for (const agentId of twins) {
      expect(await db.changeStates(agentId)).toEqual([false]);
      expect(await db.agentApproved(agentId)).toBe(false);
      expect(await db.pendingRow(agentId)).toBe(true);
    }
    expect(await db.changeCount(foreign)).toBe(0);
    expect(await db.agentApproved(foreign)).toBe(true);
    // A second disable while the first one's claim is live: recorded, not claimed.
    const again = await batches.disableMany(
      networkId,
      [{ agentId: twins[0]!, claimToken: randomUUID(), traceParent: null }],
      author,
      leaseOf(),
      11,
    );
    expect(again.get(twins[0]!)).toMatchObject({ claimed: false, flagged: true });
    expect(await db.changeStates(twins[0]!)).toEqual([false, false]);
    const after = await campaignScans();
    expect(after.idx_scan).toBeGreaterThan(before.idx_scan);
    expect(after.seq_scan - before.seq_scan).toBe(0);
  });
});

describe('enables of many agents in one statement', () => {
  it('enables each agent of the network and supersedes its pending disable; an agent row another transaction holds is answered locked, holding back no other', async () => {
    const [pendingOne, plain, held] = [await agentWith(2), await agentWith(0, networkId), await agentWith(1)];
    const foreign = await agentWith(0, otherNetworkId);
    await agents.disable(networkId, pendingOne, author, { ...leaseOf(), traceParent: null }, 11);
    const hold = await db.holdAgentRow(held);
    let made: Awaited<ReturnType<AgentBatchStatements['enableMany']>>;
    try {
      made = await batches.enableMany(networkId, [pendingOne, plain, held, foreign, 'no-such-agent'], author);
    } finally {
      await hold.end();
    }
    expect(Object.fromEntries(made)).toEqual({
      [pendingOne]: { supersededDisable: true },
      [plain]: { supersededDisable: false },
      [held]: 'locked',
    });
    expect(await db.pendingRow(pendingOne)).toBe(false);
    expect(await db.changeStates(pendingOne)).toEqual([false, true]);
    expect(await db.changeStates(plain)).toEqual([true]);
    expect(await db.changeStates(held)).toEqual([]);
    expect(await db.changeCount(foreign)).toBe(0);
  });
});

describe('marks of many runs in one statement', () => {
  it('marks each run as its own mark would: finishing one with its completion, renewing another, leaving a locked campaign to its run', async () => {
    const [whole, part, locked] = [await agentWith(3), await agentWith(4), await agentWith(2)];
    const claims = new Map<string, ReturnType<typeof leaseOf>>();
    const first = new Map<string, string[]>();
    for (const agentId of [whole, part, locked]) {
      const lease = leaseOf();
      claims.set(agentId, lease);
      const outcome = (await agents.disable(networkId, agentId, author, { ...lease, traceParent: null }, 11)) as DisableOutcome;
      first.set(agentId, outcome.firstBatch);
    }
    const heldCampaign = first.get(locked)![0]!;
    const holder = new pg.Client({ connectionString: databaseUrl() });
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM campaigns WHERE campaign_id = $1 FOR UPDATE', [heldCampaign]);
    let marked: Awaited<ReturnType<AgentBatchStatements['markPausedMany']>>;
    try {
      marked = await batches.markPausedMany([
        { agentId: whole, campaignIds: first.get(whole)!, claim: claims.get(whole)!, finish: true, settledCalls: [] },
        { agentId: part, campaignIds: first.get(part)!.slice(0, 2), claim: claims.get(part)!, finish: false, settledCalls: [] },
        { agentId: locked, campaignIds: first.get(locked)!, claim: claims.get(locked)!, finish: true, settledCalls: [] },
      ]);
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
    expect(marked.get(whole)).toEqual({ moved: 3, skipped: [], finished: true });
    expect(marked.get(part)).toEqual({ moved: 2, skipped: [], finished: false });
    expect(marked.get(locked)).toEqual({ moved: 1, skipped: [heldCampaign], finished: false });
    expect(await db.pendingRow(whole)).toBe(false);
    const completions = await db.pool.query('SELECT paused_count FROM disable_completions WHERE agent_id = $1', [whole]);
    expect(completions.rows).toEqual([{ paused_count: 3 }]);
    const counted = await db.pool.query('SELECT agent_id, paused_count FROM pending_disables WHERE agent_id = ANY($1) ORDER BY agent_id', [
      [part, locked],
    ]);
    expect(Object.fromEntries(counted.rows.map((row) => [row.agent_id, row.paused_count]))).toEqual({ [part]: 2, [locked]: 1 });
    expect((await db.pausedIds(locked)).has(heldCampaign)).toBe(false);
  });
});

describe('two batch statements over the same agents', () => {
  /**
   * Holds the change lock of the sixth of ten agents (in agent order) from another session, starts
   * the statement on the ten given in reverse order, and reads which change locks it holds while it
   * waits: the five agents before the held one, and none after. Locks taken in one order by every
   * batch statement are what keeps two of them from waiting for each other in a cycle.
   */
  async function locksHeldWhileWaiting(start: (ids: string[]) => Promise<unknown>, ids: string[]) {
    const sorted = [...ids].sort();
    const blocker = new pg.Client({ connectionString: databaseUrl() });
    await blocker.connect();
    await blocker.query('BEGIN');
    await blocker.query('SELECT pg_advisory_xact_lock(1885434739, hashtext($1))', [sorted[5]]);
    const running = start([...ids].reverse());
    running.catch(() => undefined);
    try {
      let waiting: { pid: number } | undefined;
      await vi.waitFor(
        async () => {
          const { rows } = await db.pool.query(
            `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = 1885434739 AND NOT granted AND pid <> $1`,
            [(await blocker.query('SELECT pg_backend_pid() AS pid')).rows[0].pid],
          );
          waiting = rows[0];
          expect(waiting).toBeDefined();
        },
        { timeout: 10_000, interval: 20 },
      );
      const { rows } = await db.pool.query(
        `SELECT objid::int AS hash FROM pg_locks WHERE locktype = 'advisory' AND classid = 1885434739 AND granted AND pid = $1`,
        [waiting!.pid],
      );
      const hashes = await db.pool.query('SELECT id, hashtext(id) AS hash FROM unnest($1::text[]) AS id', [sorted]);
      const agentOf = new Map(hashes.rows.map((row) => [row.hash as number, row.id as string]));
      return rows.map((row) => agentOf.get(row.hash)).sort();
    } finally {
      await blocker.query('ROLLBACK');
      await blocker.end();
      await running;
    }
  }

  it("take their agents' change locks in agent order, whatever order the agents come in", async () => {
    const disabled = await Promise.all(Array.from({ length: 10 }, () => agentWith(2)));
    const firstFive = [...disabled].sort().slice(0, 5);
    expect(
      await locksHeldWhileWaiting(
        (ids) =>
          batches.disableMany(
            networkId,
            ids.map((agentId) => ({ agentId, claimToken: randomUUID(), traceParent: null })),
            author,
            leaseOf(),
            11,
          ),
        disabled,
      ),
    ).toEqual(firstFive);
    expect(await locksHeldWhileWaiting((ids) => batches.enableMany(networkId, ids, author), disabled)).toEqual(firstFive);

    const marking = await Promise.all(Array.from({ length: 10 }, () => agentWith(1)));
    const marks = new Map<string, { claim: ReturnType<typeof leaseOf>; ids: string[] }>();
    for (const agentId of marking) {
      const claim = leaseOf();
      const outcome = (await agents.disable(networkId, agentId, author, { ...claim, traceParent: null }, 11)) as DisableOutcome;
      marks.set(agentId, { claim, ids: outcome.firstBatch });
    }
    expect(
      await locksHeldWhileWaiting(
        (ids) =>
          batches.markPausedMany(
            ids.map((agentId) => ({
              agentId,
              campaignIds: marks.get(agentId)!.ids,
              claim: marks.get(agentId)!.claim,
              finish: true,
              settledCalls: [],
            })),
          ),
        marking,
      ),
    ).toEqual([...marking].sort().slice(0, 5));
  });
});
