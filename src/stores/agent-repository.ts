import { type CommonQueryMethods, type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import { defaultEventSource } from '../config.js';
import type { Metrics } from '../observability/metrics.js';
import { uuidArray } from './array-params.js';
import { completionEvent } from './event-outbox.js';
import { changeLock, postgresCall, seconds } from './postgres.js';
import { type Statement, statementsFor } from './statements.js';

// The agents' side of the database: the flag and the change history a status change writes, the
// status and history reads, and the campaigns a disable marks paused.

const oneRow = z.object({ one: z.number() });
const enableRow = z.object({ superseded: z.boolean() });
const markRow = z.object({ n: z.number(), skipped: z.array(z.string()), finished: z.boolean() });
const disableRow = z.object({
  change_id: z.string(),
  claimed: z.boolean(),
  flagged: z.boolean(),
  campaign_ids: z.array(z.string()),
  unpaused: z.number(),
});
const statusRow = z.object({
  agent_id: z.string(),
  network_id: z.string(),
  agent_approved: z.boolean(),
  active_unpaused: z.number(),
  in_progress: z.boolean(),
  latest_change_id: z.string(),
});
const idsRow = z.object({ ids: z.array(z.string()) });
const latestRow = z.object({ latest: z.string() });
const lockedRow = z.object({ locked: z.boolean() });
const historyRow = z.object({
  change_id: z.string().nullable(),
  enabled: z.boolean().nullable(),
  partner_name: z.string().nullable(),
  request_id: z.string().nullable(),
  changed_at: z.string().nullable(),
});
const countRow = z.object({ n: z.number() });
const readOnlyRow = z.object({ read_only: z.boolean() });

/** Who asked for a status change, for the audit trail (never the key). */
export interface ChangeAuthor {
  partnerName: string;
  requestId: string | undefined;
}

export interface Lease {
  claimToken: string;
  owner: string;
  leaseMs: number;
}

export interface DisableOutcome {
  /** The agent_status_changes row this request appended. */
  changeId: string;
  /** Whether this request's run holds the pending row's claim (false: another run holds it). */
  claimed: boolean;
  /**
   * Whether the same statement committed agent_approved = false. False when another transaction
   * held the agent row (a platform transaction writing one of its campaigns): the intent is
   * recorded all the same, and the run sets the flag once the row is free.
   */
  flagged: boolean;
  /** The first batch of active, unpaused campaigns, read by the same statement (empty unless flagged). */
  firstBatch: string[];
  /** Active, unpaused campaigns of the agent when the statement ran. */
  unpaused: number;
}

export interface AgentStatusView {
  agentId: string;
  networkId: string;
  enabled: boolean;
  activeUnpausedCampaignCount: number;
  disableInProgress: boolean;
}

/**
 * What a status change may additionally be bound to (docs/interfaces.md §11). `ifMatch`: the change
 * is made only while the agent's latest change is one of these numbers (its number among the
 * agent's changes, migration 011; '0': the agent has none);
 * the check and the change are one transaction, serialised with every other change of the agent.
 * `keyClaim`: the idempotency key this request holds; the change's statement records its change id
 * there, fenced by the claim and its lease, and changes nothing when the key passed to another
 * request meanwhile (the method answers 'key_lost').
 */
export interface ChangeConditions {
  ifMatch?: readonly string[];
  keyClaim?: { networkId: string; key: string; claimToken: string };
}

/** An agent's change rows, newest first, after the statement that checked the network. */
export interface StatusChangeRow {
  changeId: string;
  enabled: boolean;
  partnerName: string;
  requestId: string | null;
  changedAt: string;
}

/**
 * The agent and campaign statements. Each method is one autocommit statement (or, with If-Match,
 * one explicit transaction block); the hot ones are made by `statement` (src/stores/statements.ts:
 * named prepared statements unless a pooler is configured); the network id from the partner's key is part of every agent
 * lookup, so an agent of another network is never read or written. The pending-disables queue and
 * its lease are src/stores/disable-queue.ts.
 */
export interface AgentRepository {
  /**
   * agent_approved = true, the pending disable deleted, a change row appended (`supersededDisable`:
   * a pending disable was deleted, whose run may still be about to start a call); false: not in the
   * network; 'precondition_failed': `conditions.ifMatch` did not match, nothing changed; 'key_lost':
   * the request no longer held `conditions.keyClaim`, nothing changed.
   */
  enable(
    networkId: string,
    agentId: string,
    author: ChangeAuthor,
    conditions?: ChangeConditions,
  ): Promise<{ supersededDisable: boolean } | false | 'precondition_failed' | 'key_lost'>;
  /**
   * Records the disable without waiting for any lock: the pending row upserted (claimed for this
   * request unless another live run holds it) and a change row appended; agent_approved = false
   * and the first batch read too when the agent row is free. undefined: not in the network.
   */
  disable(
    networkId: string,
    agentId: string,
    author: ChangeAuthor,
    lease: Lease & { traceParent: string | null },
    batchSize: number,
    conditions?: ChangeConditions,
  ): Promise<DisableOutcome | undefined | 'precondition_failed' | 'key_lost'>;
  /** The status, and the number of the agent's latest change among its changes ('0' when it has none). */
  readStatus(networkId: string, agentId: string): Promise<(AgentStatusView & { latestChangeId: string }) | undefined>;
  /**
   * Up to `limit` change rows of the agent numbered below `before` (null: from the latest), newest
   * first, each with its number among the agent's changes as its changeId; undefined: not in the network.
   */
  statusChanges(networkId: string, agentId: string, before: string | null, limit: number): Promise<StatusChangeRow[] | undefined>;
  /** The agent's next active, unpaused campaigns after `after`, in campaign order. A read only. */
  nextBatch(agentId: string, after: string | null, batchSize: number): Promise<string[]>;
  /**
   * Marks paused every campaign of a batch that spend management and Redis confirmed and that is
   * not paused yet, whichever agent it belongs to now (a campaign moved meanwhile is paused in the
   * other stores: the database follows, so the three agree). A campaign row locked by another
   * transaction is skipped, not waited for (`skipped` names it: retried later). The same
   * statement renews the run's lease (progress) and, with `finish` (on what was read as the run's
   * last batch), deletes the pending row when no active, unpaused campaign of the agent is left.
   */
  markPaused(
    agentId: string,
    campaignIds: readonly string[],
    claim: Lease,
    finish: boolean,
    /**
     * Calls (their keys) whose every campaign spend management confirmed is among `campaignIds`:
     * their record is deleted with this statement unless a lock left one of their campaigns out.
     */
    settledCalls?: readonly string[],
  ): Promise<{ moved: number; skipped: string[]; finished: boolean }>;
  remainingCampaigns(agentId: string): Promise<number>;
  /**
   * Whether the server this pool reaches takes writes: 'read_only' for a standby or a server that
   * makes every transaction read-only (a demoted primary, the old address after a failover).
   */
  ping(): Promise<'writable' | 'read_only'>;
}

/**
 * The CTEs `change` and `keyed` of a status change's statement: the change row, appended from the
 * CTE `serial` (after the change lock), which is also its event (its xid and time are the columns'
 * defaults, docs/events-order.md), and its id written to the idempotency key this request holds,
 * fenced by the claim (no key: no row matches).
 */
const recordChange = (enabled: boolean, author: ChangeAuthor, claim: ChangeConditions['keyClaim']) => sql.fragment`change AS (
    INSERT INTO agent_status_changes (agent_id, network_id, enabled, partner_name, request_id)
    SELECT agent_id, network_id, ${enabled}, ${author.partnerName}, ${author.requestId ?? null} FROM serial
    RETURNING change_id, agent_id, network_id, enabled, agent_seq, changed_at
  ), keyed AS (
    -- An UPDATE, so it reads the key's latest version after every wait of the statement: a repeat
    -- that took the key over meanwhile (this request's lease ran out) leaves it no row, and then
    -- key_held rolls the whole statement back (migration 019).
    UPDATE idempotency_keys k SET change_id = c.change_id FROM change c
    WHERE k.network_id = ${claim?.networkId ?? null}::uuid AND k.idempotency_key = ${claim?.key ?? null}
      AND k.claim_token = ${claim?.claimToken ?? null}::uuid AND k.lease_until > clock_timestamp()
    RETURNING 1
  ), key_held AS (
    SELECT public.require_idempotency_key(${claim === undefined} OR EXISTS (SELECT 1 FROM keyed)) AS held
  )`;

/**
 * The CTEs `flagged` and `pending` of a disable's statement: agent_approved = false on the agent
 * rows of the CTE `lockable` (found by primary key, never by a join that may read the whole table),
 * and the pending row of each agent of the CTE `serial` (after its change lock) upserted with the
 * claim given, claimed unless another live run holds it (`pending` returns the agents claimed). The
 * claim's token and trace context are expressions: a value, or a column of `serial` in a statement
 * of many agents (src/stores/agent-batches.ts).
 */
export const flagAndClaim = (
  lease: { leaseMs: number; owner: string },
  claimToken: ReturnType<typeof sql.fragment>,
  traceParent: ReturnType<typeof sql.fragment>,
) => sql.fragment`flagged AS (
    UPDATE agents a SET agent_approved = false
    WHERE a.agent_id = ANY(ARRAY(SELECT agent_id FROM lockable))
    RETURNING a.agent_id
  ), pending AS (
    INSERT INTO pending_disables AS p
      (agent_id, requested_at, attempts, next_attempt_at, claim_token, lease_owner, trace_parent)
    SELECT agent_id, now(), 1, now() + ${seconds(lease.leaseMs)}, ${claimToken}, ${lease.owner}, ${traceParent}
    FROM serial
    ON CONFLICT (agent_id) DO UPDATE
      SET attempts = p.attempts + 1, next_attempt_at = EXCLUDED.next_attempt_at,
          claim_token = EXCLUDED.claim_token, lease_owner = EXCLUDED.lease_owner,
          trace_parent = EXCLUDED.trace_parent
      WHERE p.claim_token IS NULL OR p.next_attempt_at <= now()
    RETURNING p.agent_id
  )`;

/** The SQLSTATE of migration 019's refusal: the request's idempotency key passed to another request. */
const keyLostSqlstate = 'P0409';

/** Whether a statement failed because its request no longer held its idempotency key. */
function lostKey(error: unknown): boolean {
  const failure = error as { code?: unknown; cause?: { code?: unknown } };
  return (failure.code ?? failure.cause?.code) === keyLostSqlstate;
}

/** A status change's statement (or transaction), answering 'key_lost' when migration 019 refused it: nothing was changed. */
async function keyHeld<T>(statement: Promise<T>): Promise<T | 'key_lost'> {
  try {
    return await statement;
  } catch (error) {
    if (lostKey(error)) return 'key_lost';
    throw error;
  }
}

interface StatementParts {
  pool: DatabasePool;
  timed: ReturnType<typeof postgresCall>;
  statement: Statement;
  /** The CloudEvents `source` of the events the statements write (EVENTS_SOURCE). */
  eventSource: string;
}

const unpausedOf = (agentId: string) => sql.fragment`c.agent_id = ${agentId} AND c.active AND NOT c.paused`;

/** `eventSource`: the CloudEvents `source` of the events the statements write (EVENTS_SOURCE). */
export function createAgentRepository(
  pool: DatabasePool,
  metrics: Metrics,
  statement: Statement = statementsFor('none'),
  eventSource: string = defaultEventSource,
): AgentRepository {
  const parts = { pool, timed: postgresCall(metrics), statement, eventSource };
  return { ...statusChanges(parts), ...statusReads(parts), ...campaignMarks(parts) };
}

/** The status changes: the flag, the change row and its event, the pending disable. */
function statusChanges({ pool, timed, statement }: StatementParts): Pick<AgentRepository, 'enable' | 'disable'> {
  return {
    enable: (networkId, agentId, author, conditions = {}) =>
      timed('enable_agent', async () => {
        const change = statement('pas_enable_agent', enableRow)`
          WITH agent AS (
            UPDATE agents SET agent_approved = true
            WHERE agent_id = ${agentId} AND network_id = ${networkId}::uuid
            RETURNING agent_id, network_id
          ), serial AS (
            SELECT agent_id, network_id, ${changeLock(agentId)} AS locked FROM agent
          ), cleared AS (
            -- After the change lock (from serial): every statement takes the agent's locks in one
            -- order, agent row, change lock, pending row, so two of them never wait for each other.
            -- Through the function (migration 015), whose snapshot also shows a disable committed
            -- while this statement waited for the change lock: that disable, too, is superseded.
            SELECT public.supersede_pending_disable(serial.agent_id) AS superseded FROM serial
          ), ${recordChange(true, author, conditions.keyClaim)}
          SELECT coalesce((SELECT superseded FROM cleared), false) AS superseded, (SELECT held FROM key_held) AS key_held FROM agent`;
        const made = (row: z.infer<typeof enableRow> | null | 'key_lost') =>
          row === 'key_lost' ? row : row ? { supersededDisable: row.superseded } : false;
        if (!conditions.ifMatch) return made(await keyHeld(pool.maybeOne(change)));
        const ifMatch = conditions.ifMatch;
        return keyHeld(
          pool.transaction(async (tx) => {
            // The agent row first (an enable may wait for it), then the agent's change lock.
            const agent = await tx.maybeOne(sql.type(oneRow)`
            SELECT 1 AS one FROM agents WHERE agent_id = ${agentId} AND network_id = ${networkId}::uuid FOR NO KEY UPDATE`);
            if (!agent) return false;
            const verdict = await checkLatest(tx, networkId, agentId, ifMatch);
            if (verdict !== 'match') return verdict === 'absent' ? false : 'precondition_failed';
            return made(await tx.maybeOne(change));
          }),
        );
      }),

    disable: (networkId, agentId, author, lease, batchSize, conditions = {}) =>
      timed('disable_agent', async () => {
        // The agent row is read plainly (the pending and change rows' foreign keys take only FOR
        // KEY SHARE, which no platform transaction conflicts with) and flagged only when it can be
        // locked at once: a platform transaction that wrote one of the agent's campaigns holds it
        // FOR SHARE (the restriction trigger) and would make an UPDATE wait.
        const change = statement('pas_disable_agent', disableRow)`
          WITH agent AS (
            SELECT agent_id, network_id FROM agents
            WHERE agent_id = ${agentId} AND network_id = ${networkId}::uuid
          ), serial AS (
            -- The change lock before the change row gets its id; held only by short statements.
            SELECT agent_id, network_id, ${changeLock(agentId)} AS locked FROM agent
          ), lockable AS (
            SELECT agent_id FROM agents
            WHERE agent_id = ${agentId} AND network_id = ${networkId}::uuid
            FOR NO KEY UPDATE SKIP LOCKED
          ), ${flagAndClaim(lease, sql.fragment`${lease.claimToken}::uuid`, sql.fragment`${lease.traceParent}`)},
          ${recordChange(false, author, conditions.keyClaim)}
          SELECT (SELECT change_id FROM change)::text AS change_id,
                 EXISTS (SELECT 1 FROM pending) AS claimed,
                 EXISTS (SELECT 1 FROM flagged) AS flagged,
                 ARRAY(SELECT id::text FROM public.unpaused_campaigns_after(agent.agent_id, NULL, ${batchSize}) AS id
                       WHERE EXISTS (SELECT 1 FROM flagged)) AS campaign_ids,
                 (SELECT count(*) FROM campaigns c WHERE ${unpausedOf(agentId)})::int AS unpaused,
                 (SELECT held FROM key_held) AS key_held
          FROM agent`;
        let row: z.infer<typeof disableRow> | null;
        if (conditions.ifMatch) {
          const ifMatch = conditions.ifMatch;
          const result = await keyHeld(
            pool.transaction(async (tx) => {
              // No wait for the agent row here: the network with the change lock, the check, the statement.
              const verdict = await checkLatest(tx, networkId, agentId, ifMatch);
              if (verdict !== 'match') return verdict;
              return tx.maybeOne(change);
            }),
          );
          if (result === 'key_lost') return result;
          if (result === 'absent') return undefined;
          if (result === 'mismatch') return 'precondition_failed';
          row = result;
        } else {
          const result = await keyHeld(pool.maybeOne(change));
          if (result === 'key_lost') return result;
          row = result;
        }
        return row
          ? { changeId: row.change_id, claimed: row.claimed, flagged: row.flagged, firstBatch: row.campaign_ids, unpaused: row.unpaused }
          : undefined;
      }),
  };
}

/** What a partner reads (the status, the history) and readiness's ping. */
function statusReads({
  pool,
  timed,
  statement,
}: Omit<StatementParts, 'eventSource'>): Pick<AgentRepository, 'readStatus' | 'statusChanges' | 'ping'> {
  return {
    readStatus: (networkId, agentId) =>
      timed('read_agent_status', async () => {
        const row = await pool.maybeOne(statement('pas_read_agent_status', statusRow)`
          SELECT a.agent_id, a.network_id::text AS network_id, a.agent_approved,
                 (SELECT count(*) FROM campaigns c WHERE ${unpausedOf(agentId)})::int AS active_unpaused,
                 EXISTS (SELECT 1 FROM pending_disables p WHERE p.agent_id = a.agent_id) AS in_progress,
                 coalesce((SELECT k.last_seq FROM agent_change_counters k WHERE k.agent_id = a.agent_id), 0)::text AS latest_change_id
          FROM agents a
          WHERE a.agent_id = ${agentId} AND a.network_id = ${networkId}::uuid`);
        return row
          ? {
              agentId: row.agent_id,
              networkId: row.network_id,
              enabled: row.agent_approved,
              activeUnpausedCampaignCount: row.active_unpaused,
              disableInProgress: row.in_progress,
              latestChangeId: row.latest_change_id,
            }
          : undefined;
      }),

    statusChanges: (networkId, agentId, before, limit) =>
      timed('read_status_changes', async () => {
        // coalesce, not "$before IS NULL OR …": a generic plan keeps coalesce as an index condition.
        const rows = await pool.any(statement('pas_read_status_changes', historyRow)`
          SELECT s.agent_seq::text AS change_id, s.enabled, s.partner_name, s.request_id,
                 to_char(s.changed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS changed_at
          FROM agents a
          LEFT JOIN LATERAL (
            SELECT * FROM agent_status_changes c
            WHERE c.agent_id = a.agent_id AND c.network_id = a.network_id
              AND c.agent_seq < coalesce(${before}::bigint, 9223372036854775807)
            ORDER BY c.agent_seq DESC
            LIMIT ${limit}
          ) s ON true
          WHERE a.agent_id = ${agentId} AND a.network_id = ${networkId}::uuid
          ORDER BY s.agent_seq DESC`);
        if (rows.length === 0) return undefined;
        return rows.flatMap((row) =>
          row.change_id === null
            ? []
            : [
                {
                  changeId: row.change_id,
                  enabled: row.enabled!,
                  partnerName: row.partner_name!,
                  requestId: row.request_id,
                  changedAt: row.changed_at!,
                },
              ],
        );
      }),

    ping: () =>
      timed('ping', async () => {
        const readOnly = await pool.oneFirst(sql.type(readOnlyRow)`
          SELECT pg_is_in_recovery() OR current_setting('transaction_read_only')::boolean AS read_only`);
        return readOnly ? 'read_only' : 'writable';
      }),
  };
}

/** The campaigns a disable pauses: the next batch, the mark (which may finish the disable), what is left. */
function campaignMarks({
  pool,
  timed,
  statement,
  eventSource,
}: StatementParts): Pick<AgentRepository, 'nextBatch' | 'markPaused' | 'remainingCampaigns'> {
  return {
    nextBatch: (agentId, after, batchSize) =>
      timed('next_campaign_batch', async () => {
        const row = await pool.one(statement('pas_next_campaign_batch', idsRow)`
          SELECT ARRAY(SELECT id::text FROM public.unpaused_campaigns_after(${agentId}, ${after}::uuid, ${batchSize}) AS id) AS ids`);
        return row.ids;
      }),

    markPaused: (agentId, campaignIds, claim, finish, settledCalls = []) =>
      timed('mark_campaigns_paused', async () => {
        const row = await pool.one(statement('pas_mark_campaigns_paused', markRow)`
          WITH serial AS (
            -- Only on what may be the run's last batch: the agent's change lock, before the pending
            -- row's (the order of every statement), so that the completion event this statement may
            -- write takes its place among the agent's changes (src/stores/event-outbox.ts).
            SELECT ${changeLock(agentId)} AS locked WHERE ${finish}
          ), lockable AS (
            -- Found by primary key only. SKIP LOCKED: a campaign row that another transaction
            -- holds is left for a later pass instead of holding back the batch (and its locks).
            SELECT c.campaign_id FROM campaigns c
            WHERE c.campaign_id = ANY(${uuidArray(campaignIds)}) AND NOT c.paused
            FOR NO KEY UPDATE SKIP LOCKED
          ), moved AS (
            UPDATE campaigns c SET paused = true
            FROM lockable l WHERE c.campaign_id = l.campaign_id
            RETURNING c.campaign_id
          ), unfinished AS (
            -- Only asked on what was read as the run's last batch. The statement's snapshot still
            -- shows the campaigns it moves as unpaused: any other unpaused campaign of the agent is
            -- among the first (moved + 1) in campaign order.
            SELECT CASE WHEN ${finish} THEN EXISTS (
              SELECT 1 FROM public.unpaused_campaigns_after(${agentId}, NULL, (SELECT count(*) FROM moved)::int + 1) AS id
              WHERE id NOT IN (SELECT campaign_id FROM moved)) ELSE true END AS left_over
          ), finished AS (
            DELETE FROM pending_disables p
            WHERE p.agent_id = ${agentId} AND p.claim_token = ${claim.claimToken}::uuid
              AND NOT (SELECT left_over FROM unfinished) AND EXISTS (SELECT 1 FROM serial)
            RETURNING p.paused_count + (SELECT count(*) FROM moved)::int AS paused
          ), completed AS (
            SELECT ${completionEvent(agentId, sql.fragment`f.paused`, eventSource)} AS event_id FROM finished f
          ), renewed AS (
            -- Progress renews the lease: a run stuck on a statement or a call renews nothing, and
            -- its claim passes to another replica when the lease runs out. The campaigns it paused
            -- count for the disable's completion event.
            UPDATE pending_disables p
            SET next_attempt_at = now() + ${seconds(claim.leaseMs)}, paused_count = p.paused_count + (SELECT count(*) FROM moved)::int
            WHERE p.agent_id = ${agentId} AND p.claim_token = ${claim.claimToken}::uuid
              AND (SELECT left_over FROM unfinished)
          ), counted AS (
            -- Campaigns paused by a call settled without the claim (the worker settling recorded
            -- calls) or by a run whose claim passed on: on behalf of the agent's disable all the same.
            UPDATE pending_disables p SET paused_count = p.paused_count + (SELECT count(*) FROM moved)::int
            WHERE p.agent_id = ${agentId} AND p.claim_token IS DISTINCT FROM ${claim.claimToken}::uuid
              AND EXISTS (SELECT 1 FROM moved)
          ), skipped AS (
            -- Looked up only for the ids the lock left out (none, almost always).
            SELECT c.campaign_id FROM campaigns c
            WHERE c.campaign_id = ANY(ARRAY(
                    SELECT unnest(${uuidArray(campaignIds)}) EXCEPT SELECT campaign_id FROM lockable))
              AND NOT c.paused
          ), settled AS (
            -- The record of these calls: settled now in all three stores (paused here by this
            -- statement or before it), unless a lock left one of their campaigns out.
            DELETE FROM pause_calls p
            WHERE p.call_key = ANY(${uuidArray(settledCalls)})
              AND NOT (coalesce(p.answered_ids, p.campaign_ids) && ARRAY(SELECT campaign_id FROM skipped))
          )
          SELECT (SELECT count(*) FROM moved)::int AS n,
                 ARRAY(SELECT campaign_id::text FROM skipped) AS skipped,
                 EXISTS (SELECT 1 FROM completed) AS finished`);
        return { moved: row.n, skipped: row.skipped, finished: row.finished };
      }),

    remainingCampaigns: (agentId) =>
      timed('count_unpaused_campaigns', async () => {
        const row = await pool.one(sql.type(countRow)`SELECT count(*)::int AS n FROM campaigns c WHERE ${unpausedOf(agentId)}`);
        return row.n;
      }),
  };
}

/**
 * Inside a conditional change's transaction: checks the network and takes the agent's change lock,
 * then (a statement of its own, so that its snapshot sees every change committed before the lock was
 * granted) compares the latest change with the ones the request accepts. The lock is taken only for
 * a row of the key's network: another network's agent answers 'absent' at once, never after waiting
 * for that agent's changes (docs/interfaces.md §10).
 */
async function checkLatest(
  tx: CommonQueryMethods,
  networkId: string,
  agentId: string,
  accepted: readonly string[],
): Promise<'match' | 'mismatch' | 'absent'> {
  const locked = await tx.maybeOne(sql.type(lockedRow)`
    SELECT ${changeLock(agentId)} IS NULL AS locked FROM agents WHERE agent_id = ${agentId} AND network_id = ${networkId}::uuid`);
  if (!locked) return 'absent';
  const row = await tx.one(sql.type(latestRow)`
    SELECT coalesce((SELECT last_seq FROM agent_change_counters WHERE agent_id = ${agentId}), 0)::text AS latest`);
  return accepted.includes(row.latest) ? 'match' : 'mismatch';
}
