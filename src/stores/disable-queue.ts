import { type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import { defaultEventSource } from '../config.js';
import type { Metrics } from '../observability/metrics.js';
import type { Lease } from './agent-repository.js';
import { textArray, uuidArray } from './array-params.js';
import { completionEvent } from './event-outbox.js';
import { changeLock, postgresCall, seconds } from './postgres.js';
import type { SentBatch } from './sent-pauses.js';
import { type Statement, statementsFor } from './statements.js';

const heldRow = z.object({ held: z.boolean() });
const heldAgentsRow = z.object({ held: z.array(z.string()) });
const flagRow = z.object({ held: z.boolean(), flagged: z.boolean() });
const takeOverRow = z.object({ claimed: z.boolean(), pending: z.boolean() });
const claimRow = z.object({
  agent_id: z.string(),
  network_id: z.string(),
  claim_token: z.string(),
  attempts: z.number(),
  trace_parent: z.string().nullable(),
  partner_name: z.string().nullable(),
});
const releasedRow = z.object({ disables: z.number(), campaigns: z.number() });
const existsRow = z.object({ flag: z.boolean() });
const statsRow = z.object({
  n: z.number(),
  oldest_age_seconds: z.number(),
  unsettled: z.number(),
  unsettled_oldest_age_seconds: z.number(),
});

/** One agent's part of a shared pause call: its run's claim, and its campaigns under the part's own record key. */
export interface SharedPart {
  agentId: string;
  lease: Lease;
  renew: boolean;
  batch: SentBatch;
}

/** A pending disable claimed by the worker. */
export interface ClaimedDisable {
  agentId: string;
  networkId: string;
  claimToken: string;
  attempts: number;
  traceParent: string | null;
  /** The label of the key that asked for the latest disable, for the metrics (never the key). */
  partnerName: string;
}

/**
 * The pending-disables queue (docs/interfaces.md §9) and
 * its lease. One row per agent whose accepted disable is not finished. A claim is the pair
 * (claim_token, next_attempt_at): every way to take a disable (the request's own statement, a
 * take-over, the worker's claim) writes a new token and a lease; every write of the run is fenced
 * by the token, so a run whose claim was superseded (an enable deleted the row) or taken over (its
 * lease ran out) can no longer change it. The lease is renewed only by progress: the check that
 * starts a pause call (renew) and the statement that marks a batch paused.
 */
export interface DisableQueue {
  /**
   * The check made inside the spend-management slot, right before pause calls: says whether the
   * claim is still this run's (held and not expired) and, only when it is, records the calls about
   * to be sent in the call record (pause_calls, docs/interfaces.md §9), one row per call with its key
   * and its campaigns, in the same statement, so that no call is ever sent unrecorded. With `renew` it also renews the lease (a lease a third
   * gone). Fenced on the row itself, so a concurrent enable or take-over is seen.
   */
  checkClaim(agentId: string, lease: Lease, renew: boolean, sent: readonly SentBatch[]): Promise<boolean>;
  /**
   * The same check for one call shared by several agents' runs (a bulk change, docs/interfaces.md
   * §16), in one statement: the agents whose claims are still their runs' (each renewed when asked),
   * and, for those only, each one's part recorded in pause_calls under the part's own key, naming
   * the call as it will be sent (`sentKey`, and the held parts' campaigns in order). A part whose
   * claim is gone is dropped from the call before it is recorded: the caller sends only the held
   * parts' campaigns, exactly what the rows name.
   */
  checkSharedClaims(parts: readonly SharedPart[], sentKey: string): Promise<Set<string>>;
  /**
   * Sets agent_approved = false for a recorded disable whose flag is not set yet, without waiting
   * for a lock. held false: the claim is gone (an enable came after it); flagged false: another
   * transaction holds the agent row, try again later. The pending row is locked first, so an enable
   * that deleted it meanwhile (even after this statement's snapshot) is always seen.
   */
  setFlag(agentId: string, claimToken: string): Promise<{ held: boolean; flagged: boolean }>;
  /** Deletes the pending row if no active, unpaused campaign is left; whether it did. */
  finish(agentId: string, claimToken: string): Promise<boolean>;
  /** Gives up the claim (due again after a capped exponential backoff, or at once); whether it was still ours. */
  release(
    agentId: string,
    claimToken: string,
    when: { backoff: { baseMs: number; maxMs: number } } | 'now',
    lastError: string | null,
  ): Promise<boolean>;
  /** Claims the pending row when no live run holds it. */
  takeOver(agentId: string, lease: Lease): Promise<{ claimed: boolean; pending: boolean }>;
  /** Whether an enable of the agent was recorded after the given change. */
  enabledSince(agentId: string, changeId: string): Promise<boolean>;
  claimDue(owner: string, leaseMs: number, limit: number): Promise<ClaimedDisable[]>;
  /**
   * Releases, at once, every claim this replica still holds (clean shutdown): pending disables, and
   * calls of the call record its worker was settling.
   */
  releaseOwned(owner: string): Promise<{ disables: number; campaigns: number }>;
  /** The worker's figures: pending disables, and campaigns of the call record not settled yet. */
  pendingStats(): Promise<{ count: number; oldestAgeSeconds: number; unsettled: { count: number; oldestAgeSeconds: number } }>;
}

/**
 * `checks` runs the claim checks and renewals (the statement inside every spend-management slot):
 * a pool of their own, so that a check never waits behind other runs' long batch statements while
 * it holds a slot. Every other statement runs on `pool`. `eventSource`: the CloudEvents `source` of
 * the completion events (EVENTS_SOURCE).
 */
export function createDisableQueue(
  pool: DatabasePool,
  metrics: Metrics,
  checks: DatabasePool = pool,
  statement: Statement = statementsFor('none'),
  eventSource: string = defaultEventSource,
): DisableQueue {
  const timed = postgresCall(metrics);
  return {
    checkClaim: (agentId, lease, renew, sent) =>
      timed(renew ? 'renew_lease' : 'check_claim', async () => {
        const ids = sent.flatMap((batch) => batch.campaignIds);
        const keys = sent.flatMap((batch) => batch.campaignIds.map(() => batch.callKey));
        const claim = renew
          ? sql.fragment`UPDATE pending_disables SET next_attempt_at = now() + ${seconds(lease.leaseMs)}
              WHERE agent_id = ${agentId} AND claim_token = ${lease.claimToken}::uuid AND next_attempt_at > now()
              RETURNING 1`
          : sql.fragment`SELECT 1 FROM pending_disables
              WHERE agent_id = ${agentId} AND claim_token = ${lease.claimToken}::uuid AND next_attempt_at > now()`;
        // One row per call, its campaigns in the order they are sent. Keys are new for every call:
        // a conflict (never expected) leaves the earlier record as it was.
        const row = await checks.one(statement(renew ? 'pas_renew_lease' : 'pas_check_claim', heldRow)`
          WITH claim AS (${claim}), recorded AS (
            INSERT INTO pause_calls (call_key, agent_id, campaign_ids, state, next_attempt_at)
            SELECT t.call_key, ${agentId}, array_agg(t.id ORDER BY t.n), 'sent', now() + ${seconds(lease.leaseMs)}
            FROM unnest(${uuidArray(ids)}, ${uuidArray(keys)}) WITH ORDINALITY AS t(id, call_key, n)
            WHERE EXISTS (SELECT 1 FROM claim)
            GROUP BY t.call_key
            ON CONFLICT (call_key) DO NOTHING
            RETURNING 1
          )
          SELECT EXISTS (SELECT 1 FROM claim) AS held`);
        return row.held;
      }),

    checkSharedClaims: (parts, sentKey) => timed('check_shared_claims', () => checkSharedClaims(checks, statement, parts, sentKey)),

    setFlag: (agentId, claimToken) =>
      timed('set_agent_flag', async () => {
        const row = await pool.one(sql.type(flagRow)`
          WITH claim AS (
            SELECT agent_id FROM pending_disables
            WHERE agent_id = ${agentId} AND claim_token = ${claimToken}::uuid AND next_attempt_at > now()
            FOR NO KEY UPDATE
          ), lockable AS (
            SELECT a.agent_id FROM agents a
            WHERE a.agent_id = ${agentId} AND EXISTS (SELECT 1 FROM claim)
            FOR NO KEY UPDATE SKIP LOCKED
          ), flagged AS (
            UPDATE agents a SET agent_approved = false
            FROM lockable l WHERE a.agent_id = l.agent_id AND a.agent_approved
            RETURNING 1
          )
          SELECT EXISTS (SELECT 1 FROM claim) AS held, EXISTS (SELECT 1 FROM lockable) AS flagged`);
        return row;
      }),

    finish: (agentId, claimToken) =>
      timed('finish_disable', async () => {
        const row = await pool.one(statement('pas_finish_disable', heldRow)`
          WITH serial AS (
            -- The agent's change lock before the pending row's (the order of every statement): the
            -- completion event takes its place among the agent's changes (src/stores/event-outbox.ts).
            SELECT ${changeLock(agentId)} AS locked
          ), finished AS (
            DELETE FROM pending_disables p
            WHERE p.agent_id = ${agentId} AND p.claim_token = ${claimToken}::uuid AND EXISTS (SELECT 1 FROM serial)
              -- Through the function, not NOT EXISTS (… campaigns c WHERE agent …): from its sixth
              -- run on a connection PostgreSQL may plan a prepared statement once for any agent, and
              -- that generic plan, expecting thousands of unpaused campaigns per agent, scans the
              -- whole table for the first one: 40 ms for an agent that has none left.
              AND NOT EXISTS (SELECT 1 FROM public.unpaused_campaigns_after(${agentId}, NULL, 1))
            RETURNING p.paused_count AS paused
          ), completed AS (
            SELECT ${completionEvent(agentId, sql.fragment`f.paused`, eventSource)} AS event_id FROM finished f
          )
          SELECT EXISTS (SELECT 1 FROM completed) AS held`);
        return row.held;
      }),

    release: (agentId, claimToken, when, lastError) =>
      timed('release_disable', async () => {
        // Backoff from the database clock: base × 2^(attempts−1), capped, with equal jitter.
        const due =
          when === 'now'
            ? sql.fragment`now()`
            : sql.fragment`now() + make_interval(secs => least(${when.backoff.maxMs}::float8,
                  ${when.backoff.baseMs}::float8 * power(2, least(attempts - 1, 20))) * (0.5 + random() / 2) / 1000)`;
        const row = await pool.one(sql.type(heldRow)`
          WITH released AS (
            UPDATE pending_disables
            SET claim_token = NULL, lease_owner = NULL, next_attempt_at = ${due},
                last_error = coalesce(${lastError}, last_error)
            WHERE agent_id = ${agentId} AND claim_token = ${claimToken}::uuid
            RETURNING 1
          )
          SELECT EXISTS (SELECT 1 FROM released) AS held`);
        return row.held;
      }),

    takeOver: (agentId, lease) =>
      timed('take_over_disable', async () => {
        return pool.one(sql.type(takeOverRow)`
          WITH taken AS (
            UPDATE pending_disables
            SET attempts = attempts + 1, claim_token = ${lease.claimToken}::uuid, lease_owner = ${lease.owner},
                next_attempt_at = now() + ${seconds(lease.leaseMs)}
            WHERE agent_id = ${agentId} AND (claim_token IS NULL OR next_attempt_at <= now())
            RETURNING 1
          )
          SELECT EXISTS (SELECT 1 FROM taken) AS claimed,
                 EXISTS (SELECT 1 FROM pending_disables WHERE agent_id = ${agentId}) AS pending`);
      }),

    enabledSince: (agentId, changeId) =>
      timed('read_status_changes', async () => {
        const row = await pool.one(sql.type(existsRow)`
          SELECT EXISTS (
            SELECT 1 FROM agent_status_changes
            WHERE agent_id = ${agentId} AND enabled AND change_id > ${changeId}::bigint
          ) AS flag`);
        return row.flag;
      }),

    claimDue: (owner, leaseMs, limit) =>
      timed('claim_pending_disables', async () => {
        // ARRAY(...) makes the locking sub-select run once (an InitPlan), so a claim never takes
        // more than `limit` rows; SKIP LOCKED lets replicas claim side by side.
        const rows = await pool.any(sql.type(claimRow)`
          UPDATE pending_disables p
          SET attempts = p.attempts + 1, claim_token = gen_random_uuid(), lease_owner = ${owner},
              next_attempt_at = now() + ${seconds(leaseMs)}
          FROM agents a
          WHERE p.agent_id = ANY (ARRAY(
                  SELECT d.agent_id FROM pending_disables d
                  WHERE d.next_attempt_at <= now()
                  ORDER BY d.next_attempt_at
                  LIMIT ${limit}
                  FOR UPDATE SKIP LOCKED))
            AND a.agent_id = p.agent_id
          RETURNING p.agent_id, a.network_id::text AS network_id, p.claim_token::text AS claim_token,
                    p.attempts, p.trace_parent,
                    (SELECT s.partner_name FROM agent_status_changes s
                      WHERE s.agent_id = p.agent_id AND NOT s.enabled
                      ORDER BY s.change_id DESC LIMIT 1) AS partner_name`);
        return rows.map((row) => ({
          agentId: row.agent_id,
          networkId: row.network_id,
          claimToken: row.claim_token,
          attempts: row.attempts,
          traceParent: row.trace_parent,
          partnerName: row.partner_name ?? 'unknown',
        }));
      }),

    releaseOwned: (owner) =>
      timed('release_owned_disables', async () => {
        const row = await pool.one(sql.type(releasedRow)`
          WITH disables AS (
            UPDATE pending_disables SET claim_token = NULL, lease_owner = NULL, next_attempt_at = now()
            WHERE lease_owner = ${owner} AND claim_token IS NOT NULL
            RETURNING 1
          ), campaigns AS (
            UPDATE pause_calls SET claim_token = NULL, lease_owner = NULL, next_attempt_at = now()
            WHERE lease_owner = ${owner} AND claim_token IS NOT NULL
            RETURNING cardinality(coalesce(answered_ids, campaign_ids)) AS n
          )
          SELECT (SELECT count(*) FROM disables)::int AS disables, (SELECT coalesce(sum(n), 0) FROM campaigns)::int AS campaigns`);
        return row;
      }),

    pendingStats: () =>
      timed('pending_disable_stats', async () => {
        const row = await pool.one(sql.type(statsRow)`
          SELECT p.n, p.oldest_age_seconds, s.n AS unsettled, s.oldest_age_seconds AS unsettled_oldest_age_seconds
          FROM (SELECT count(*)::int AS n,
                       coalesce(extract(epoch FROM now() - min(requested_at)), 0)::float8 AS oldest_age_seconds
                FROM pending_disables) p,
               (SELECT coalesce(sum(cardinality(coalesce(answered_ids, campaign_ids))), 0)::int AS n,
                       coalesce(extract(epoch FROM now() - min(sent_at)), 0)::float8 AS oldest_age_seconds
                FROM pause_calls) s`);
        return {
          count: row.n,
          oldestAgeSeconds: row.oldest_age_seconds,
          unsettled: { count: row.unsettled, oldestAgeSeconds: row.unsettled_oldest_age_seconds },
        };
      }),
  };
}

/** DisableQueue.checkSharedClaims: one statement for every part of a shared call (on the claim checks' pool). */
async function checkSharedClaims(
  checks: DatabasePool,
  statement: Statement,
  parts: readonly SharedPart[],
  sentKey: string,
): Promise<Set<string>> {
  if (parts.length === 0) return new Set<string>();
  const leaseMs = parts[0]!.lease.leaseMs;
  const ids = parts.flatMap((part) => part.batch.campaignIds);
  const partKeys = parts.flatMap((part) => part.batch.campaignIds.map(() => part.batch.callKey));
  const partAgents = parts.flatMap((part) => part.batch.campaignIds.map(() => part.agentId));
  const row = await checks.one(statement('pas_check_shared_claims', heldAgentsRow)`
          WITH input AS (
            SELECT * FROM unnest(${textArray(parts.map((part) => part.agentId))}, ${uuidArray(
              parts.map((part) => part.lease.claimToken),
            )}, ${sql.array(
              parts.map((part) => part.renew),
              'bool',
            )}) AS i(agent_id, claim_token, renew)
          ), renewed AS (
            UPDATE pending_disables p SET next_attempt_at = now() + ${seconds(leaseMs)}
            FROM input i
            WHERE i.renew AND p.agent_id = i.agent_id AND p.claim_token = i.claim_token AND p.next_attempt_at > now()
            RETURNING p.agent_id
          ), checked AS (
            SELECT p.agent_id FROM pending_disables p JOIN input i ON p.agent_id = i.agent_id AND p.claim_token = i.claim_token
            WHERE NOT i.renew AND p.next_attempt_at > now()
          ), held AS (
            SELECT agent_id FROM renewed UNION SELECT agent_id FROM checked
          ), sent AS (
            SELECT t.agent_id, t.part_key, t.id, t.n
            FROM unnest(${textArray(partAgents)}, ${uuidArray(partKeys)}, ${uuidArray(ids)})
                 WITH ORDINALITY AS t(agent_id, part_key, id, n)
            WHERE t.agent_id IN (SELECT agent_id FROM held)
          ), recorded AS (
            INSERT INTO pause_calls (call_key, agent_id, campaign_ids, state, next_attempt_at, sent_key, sent_campaign_ids)
            SELECT s.part_key, min(s.agent_id), array_agg(s.id ORDER BY s.n), 'sent', now() + ${seconds(leaseMs)},
                   ${sentKey}::uuid, ARRAY(SELECT w.id FROM sent w ORDER BY w.n)
            FROM sent s GROUP BY s.part_key
            ON CONFLICT (call_key) DO NOTHING
            RETURNING 1
          )
          SELECT ARRAY(SELECT agent_id FROM held) AS held`);
  return new Set(row.held);
}
