import { type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import type { Metrics } from '../observability/metrics.js';
import { type ChangeAuthor, type DisableOutcome, flagAndClaim, type Lease } from './agent-repository.js';
import { textArray, uuidArray } from './array-params.js';
import { completionEvent } from './event-outbox.js';
import { changeLock, postgresCall } from './postgres.js';
import type { Statement } from './statements.js';

// The statements of a bulk change (docs/interfaces.md §16) that serve many agents at once: the
// enables, the disables and the marks of up to a statement's share of one batch. Each agent gets
// exactly what the single statement of src/stores/agent-repository.ts gives it (its flag, change
// row and event, pending row, marks and completion); only the round trip is shared.
//
// Locks: the agents' change locks are taken in agent order, and an agent row is never waited for
// (SKIP LOCKED: an enable whose agent row another transaction holds is answered 'locked', and its
// change made by the single statement, which waits as it always does). Two batch statements thus
// never wait for each other in a cycle, and a single statement holds one agent's locks only.

const enableRow = z.object({ agent_id: z.string(), made: z.boolean(), superseded: z.boolean() });
const disableRow = z.object({
  agent_id: z.string(),
  change_id: z.string(),
  claimed: z.boolean(),
  flagged: z.boolean(),
  campaign_ids: z.array(z.string()),
  unpaused: z.number(),
});
const markRow = z.object({ agent_id: z.string(), n: z.number(), skipped: z.array(z.string()), finished: z.boolean() });

/** An enable of a batch statement: made (as the single enable answers it), or its agent row held by another transaction. */
export type BatchEnable = { supersededDisable: boolean } | 'locked';

/** A disable of a batch statement: the agent, and its own claim on the pending row. */
export interface BatchDisable {
  agentId: string;
  claimToken: string;
  /** The change's trace context, kept with the pending row for the runs that continue it. */
  traceParent: string | null;
}

/** A run's mark of a batch statement: the single mark's arguments (AgentRepository.markPaused). */
export interface BatchMark {
  agentId: string;
  campaignIds: readonly string[];
  /** The run's claim: its token fences the mark, its length renews the lease. */
  claim: Lease;
  finish: boolean;
  settledCalls: readonly string[];
}

export interface AgentBatchStatements {
  /** Enables of one network's agents; an agent of another network, or of none, is not in the answer. */
  enableMany(networkId: string, agentIds: readonly string[], author: ChangeAuthor): Promise<Map<string, BatchEnable>>;
  /** Disables of one network's agents, each as AgentRepository.disable records it; an agent not of the network is not in the answer. */
  disableMany(
    networkId: string,
    disables: readonly BatchDisable[],
    author: ChangeAuthor,
    lease: { owner: string; leaseMs: number },
    batchSize: number,
  ): Promise<Map<string, DisableOutcome>>;
  /** Marks of several runs (one each), each as AgentRepository.markPaused makes it. */
  markPausedMany(marks: readonly BatchMark[]): Promise<Map<string, { moved: number; skipped: string[]; finished: boolean }>>;
}

export function createAgentBatchStatements(
  pool: DatabasePool,
  metrics: Metrics,
  statement: Statement,
  eventSource: string,
): AgentBatchStatements {
  const timed = postgresCall(metrics);
  const agentLock = changeLock(sql.fragment`s.agent_id`);
  return {
    enableMany: (networkId, agentIds, author) =>
      timed('enable_agents', async () => {
        const rows = await pool.any(statement('pas_enable_agents', enableRow)`
          WITH input AS (
            SELECT unnest(${sql.array(agentIds, 'text')}) AS agent_id
          ), lockable AS (
            -- Here, in agent and in the answer, the agents by primary key, their ids as an array
            -- computed first (as in disableMany): never a read of the network's whole agents table.
            SELECT a.agent_id FROM agents a
            WHERE a.agent_id = ANY(ARRAY(SELECT agent_id FROM input)) AND a.network_id = ${networkId}::uuid
            ORDER BY a.agent_id
            FOR NO KEY UPDATE SKIP LOCKED
          ), agent AS (
            UPDATE agents a SET agent_approved = true
            WHERE a.agent_id = ANY(ARRAY(SELECT agent_id FROM lockable))
            RETURNING a.agent_id, a.network_id
          ), serial AS (
            SELECT s.agent_id, s.network_id, ${agentLock} AS locked
            FROM (SELECT agent_id, network_id FROM agent ORDER BY agent_id OFFSET 0) s
          ), cleared AS (
            SELECT serial.agent_id, public.supersede_pending_disable(serial.agent_id) AS superseded FROM serial
          ), change AS (
            INSERT INTO agent_status_changes (agent_id, network_id, enabled, partner_name, request_id)
            SELECT agent_id, network_id, true, ${author.partnerName}, ${author.requestId ?? null} FROM serial
            RETURNING agent_id
          )
          SELECT a.agent_id, c.agent_id IS NOT NULL AS made, coalesce(c.superseded, false) AS superseded
          FROM agents a LEFT JOIN cleared c ON c.agent_id = a.agent_id
          WHERE a.agent_id = ANY(ARRAY(SELECT agent_id FROM input)) AND a.network_id = ${networkId}::uuid`);
        return new Map(rows.map((row) => [row.agent_id, row.made ? { supersededDisable: row.superseded } : ('locked' as const)]));
      }),

    disableMany: (networkId, disables, author, lease, batchSize) =>
      timed('disable_agents', async () => {
        const rows = await pool.any(statement('pas_disable_agents', disableRow)`
          WITH input AS (
            SELECT * FROM unnest(${sql.array(
              disables.map((one) => one.agentId),
              'text',
            )}, ${sql.array(
              disables.map((one) => one.claimToken),
              'uuid',
            )}, ${sql.array(
              disables.map((one) => one.traceParent),
              'text',
            )}) AS i(agent_id, claim_token, trace_parent)
          ), agent AS (
            -- Here and in lockable (and flagged), the agents by primary key, their ids as an array
            -- computed first: joined to the ids as rows, a plan made for the values read the whole
            -- agents table of the network three times a statement (seen in the bench: 17,000 agents,
            -- each statement of 100 half again as slow as with the index).
            SELECT a.agent_id, a.network_id, i.claim_token, i.trace_parent
            FROM agents a JOIN input i ON i.agent_id = a.agent_id
            WHERE a.agent_id = ANY(ARRAY(SELECT agent_id FROM input)) AND a.network_id = ${networkId}::uuid
          ), serial AS (
            SELECT s.*, ${agentLock} AS locked FROM (SELECT * FROM agent ORDER BY agent_id OFFSET 0) s
          ), lockable AS (
            SELECT a.agent_id FROM agents a
            WHERE a.agent_id = ANY(ARRAY(SELECT agent_id FROM agent)) AND a.network_id = ${networkId}::uuid
            FOR NO KEY UPDATE SKIP LOCKED
          ), ${flagAndClaim(lease, sql.fragment`claim_token`, sql.fragment`trace_parent`)}, change AS (
            INSERT INTO agent_status_changes (agent_id, network_id, enabled, partner_name, request_id)
            SELECT agent_id, network_id, false, ${author.partnerName}, ${author.requestId ?? null} FROM serial
            RETURNING change_id, agent_id
          )
          SELECT c.agent_id, c.change_id::text AS change_id,
                 p.agent_id IS NOT NULL AS claimed,
                 f.agent_id IS NOT NULL AS flagged,
                 ARRAY(SELECT id::text FROM public.unpaused_campaigns_after(c.agent_id, NULL, ${batchSize}) AS id
                       WHERE f.agent_id IS NOT NULL) AS campaign_ids,
                 (SELECT count(*) FROM campaigns x WHERE x.agent_id = c.agent_id AND x.active AND NOT x.paused)::int AS unpaused
          FROM change c
          LEFT JOIN pending p ON p.agent_id = c.agent_id
          LEFT JOIN flagged f ON f.agent_id = c.agent_id`);
        return new Map(
          rows.map((row) => [
            row.agent_id,
            { changeId: row.change_id, claimed: row.claimed, flagged: row.flagged, firstBatch: row.campaign_ids, unpaused: row.unpaused },
          ]),
        );
      }),

    markPausedMany: (marks) =>
      timed('mark_campaigns_paused', async () => {
        const partAgents = marks.flatMap((mark) => mark.campaignIds.map(() => mark.agentId));
        const partIds = marks.flatMap((mark) => mark.campaignIds);
        const rows = await pool.any(statement('pas_mark_campaigns_paused_many', markRow)`
          WITH input AS (
            SELECT * FROM unnest(${textArray(marks.map((mark) => mark.agentId))}, ${uuidArray(
              marks.map((mark) => mark.claim.claimToken),
            )}, ${sql.array(
              marks.map((mark) => mark.finish),
              'bool',
            )}, ${sql.array(
              marks.map((mark) => mark.claim.leaseMs),
              'int4',
            )}) AS i(agent_id, claim_token, finish, lease_ms)
          ), part AS (
            -- Which run's mark each campaign is in (the agent it was read for).
            SELECT * FROM unnest(${textArray(partAgents)}, ${uuidArray(partIds)}) AS p(agent_id, campaign_id)
          ), serial AS (
            -- The change locks of the runs whose last batch this may be, in agent order, all of them
            -- before any pending row (moved_by waits for this): the order of every statement.
            SELECT count(*) FILTER (WHERE (${agentLock}) IS NULL) AS n
            FROM (SELECT agent_id FROM input WHERE finish ORDER BY agent_id OFFSET 0) s
          ), lockable AS (
            -- Here and in moved, the campaigns by primary key, their ids as an array computed
            -- first: given the ids themselves (or a join), the planner may read or hash the whole
            -- table for a few hundred of them (seen with 20,000 campaigns in the bench: a hash of
            -- the whole table in moved, a full read here).
            SELECT c.campaign_id FROM campaigns c
            WHERE c.campaign_id = ANY(ARRAY(SELECT campaign_id FROM part)) AND NOT c.paused
            FOR NO KEY UPDATE SKIP LOCKED
          ), moved AS (
            UPDATE campaigns c SET paused = true
            WHERE c.campaign_id = ANY(ARRAY(SELECT campaign_id FROM lockable))
            RETURNING c.campaign_id
          ), moved_by AS (
            SELECT i.agent_id, i.claim_token, i.finish, i.lease_ms, count(m.campaign_id)::int AS n
            FROM input i
            LEFT JOIN part p ON p.agent_id = i.agent_id
            LEFT JOIN moved m ON m.campaign_id = p.campaign_id
            WHERE (SELECT n FROM serial) >= 0
            GROUP BY i.agent_id, i.claim_token, i.finish, i.lease_ms
          ), unfinished AS (
            -- Any other unpaused campaign of the agent (those this statement moved still read as
            -- unpaused in its snapshot). Correlated on the agent, not a parameter, so no generic
            -- plan guesses for "any agent" (what the single mark's function guards against). A
            -- lateral probe with LIMIT 1 is made run by run, through the agent's unpaused index:
            -- as an EXISTS, a plan for 100 finishing runs read the whole campaigns table once
            -- instead (36 ms for 70,000 campaigns in the bench, against 2.5 ms of probes). A call
            -- of unpaused_campaigns_after per run cost a fifth of the statement.
            SELECT b.*, (NOT b.finish OR o.found IS NOT NULL) AS left_over
            FROM moved_by b
            LEFT JOIN LATERAL (
              SELECT true AS found FROM campaigns c
              WHERE b.finish AND c.agent_id = b.agent_id AND c.active AND NOT c.paused
                AND c.campaign_id NOT IN (SELECT campaign_id FROM moved)
              LIMIT 1
            ) o ON true
          ), finished AS (
            DELETE FROM pending_disables p USING unfinished u
            WHERE p.agent_id = u.agent_id AND p.claim_token = u.claim_token AND u.finish AND NOT u.left_over
            RETURNING p.agent_id, p.paused_count + u.n AS paused
          ), completed AS (
            SELECT f.agent_id, ${completionEvent(sql.fragment`f.agent_id`, sql.fragment`f.paused`, eventSource)} AS event_id
            FROM finished f
          ), renewed AS (
            UPDATE pending_disables p
            SET next_attempt_at = now() + make_interval(secs => u.lease_ms / 1000.0), paused_count = p.paused_count + u.n
            FROM unfinished u
            WHERE p.agent_id = u.agent_id AND p.claim_token = u.claim_token AND u.left_over
          ), counted AS (
            UPDATE pending_disables p SET paused_count = p.paused_count + b.n
            FROM moved_by b
            WHERE p.agent_id = b.agent_id AND p.claim_token IS DISTINCT FROM b.claim_token AND b.n > 0
          ), skipped AS (
            SELECT c.campaign_id FROM campaigns c
            WHERE c.campaign_id = ANY(ARRAY(
                    SELECT campaign_id FROM part EXCEPT SELECT campaign_id FROM lockable))
              AND NOT c.paused
          ), settled AS (
            DELETE FROM pause_calls p
            WHERE p.call_key = ANY(${uuidArray(marks.flatMap((mark) => mark.settledCalls))})
              AND NOT (coalesce(p.answered_ids, p.campaign_ids) && ARRAY(SELECT campaign_id FROM skipped))
          ), skipped_by AS (
            -- Each run's skipped campaigns, in one pass (not one scan of every part per run).
            SELECT p.agent_id, array_agg(p.campaign_id::text) AS ids
            FROM part p JOIN skipped s ON s.campaign_id = p.campaign_id
            GROUP BY p.agent_id
          )
          SELECT b.agent_id, b.n, coalesce(k.ids, '{}') AS skipped,
                 EXISTS (SELECT 1 FROM completed c WHERE c.agent_id = b.agent_id) AS finished
          FROM moved_by b LEFT JOIN skipped_by k ON k.agent_id = b.agent_id`);
        return new Map(rows.map((row) => [row.agent_id, { moved: row.n, skipped: row.skipped, finished: row.finished }]));
      }),
  };
}
