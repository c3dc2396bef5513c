import { randomUUID } from 'node:crypto';
import { type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import type { Metrics } from '../observability/metrics.js';
import { uuidArray } from './array-params.js';
import { postgresCall, seconds } from './postgres.js';

/** One pause call: the campaigns it names, in the order sent, and its idempotency key. */
export interface SentBatch {
  campaignIds: readonly string[];
  callKey: string;
}

/** Campaigns a 200 named that are not settled yet in Redis and the database, by call. */
export interface AnsweredCall {
  callKey: string;
  unsettled: readonly string[];
}

/** A recorded call, claimed by a replica's worker to be settled. */
export interface RecordedCall {
  agentId: string;
  callKey: string;
  /** The call exactly as first sent: a call in doubt is sent again with these campaigns, in this order, and no other. */
  campaignIds: string[];
  /**
   * undefined: the call's answer never came (a time-out, a cut connection, a process that died): it
   * is in doubt and sent again as it was. Otherwise spend management answered 200 naming these
   * campaigns, not settled yet: only Redis and the database are left, and the call is not sent again.
   */
  answered: string[] | undefined;
  /** The label of the key that asked for the agent's latest disable (metrics only). */
  partnerName: string;
  /**
   * The shared call this record is one agent's part of (a bulk change, docs/interfaces.md §16): in
   * doubt, that whole call is sent again as it was (its key, all its campaigns), and only this part's
   * campaigns are settled from the answer. undefined: the record is the call.
   */
  sentAs?: SentBatch;
}

export interface RecordedClaim {
  claimToken: string;
  calls: RecordedCall[];
}

const claimedRow = z.object({
  call_key: z.string(),
  agent_id: z.string(),
  campaign_ids: z.array(z.string()),
  answered_ids: z.array(z.string()).nullable(),
  partner_name: z.string().nullable(),
  sent_key: z.string().nullable(),
  sent_campaign_ids: z.array(z.string()).nullable(),
});
const countRow = z.object({ n: z.number() });

/** The (campaign, call key) pairs of answered calls, as two parallel arrays a statement groups by key. */
function pairs(calls: readonly AnsweredCall[]) {
  const ids = calls.flatMap((call) => call.unsettled);
  const keys = calls.flatMap((call) => call.unsettled.map(() => call.callKey));
  return { ids: uuidArray(ids), keys: uuidArray(keys) };
}

/**
 * The call record (pause_calls, docs/interfaces.md §9): one row per pause call, written by the
 * claim check right before the call (src/stores/disable-queue.ts, state 'sent') and deleted by the
 * statement that marks its campaigns paused (src/stores/agent-repository.ts, markPaused). Here: what
 * a run says about its calls once it knows their outcome, and the worker's claims on calls that
 * nobody settles (their lease, next_attempt_at, ran out), with the usual backoff. A row is only
 * ever written for its own call: a retry of the disable makes new calls under new keys.
 */
export interface SentPauses {
  /**
   * Calls known to have paused nothing: not sent after all (a late or lost claim check, a stop, an
   * open breaker, a refused connection) or answered with a status other than 200, or a 200 that
   * named none of their campaigns. Their rows go; only rows still waiting for an answer ('sent').
   */
  forget(callKeys: readonly string[]): Promise<void>;
  /** Calls answered 200 whose campaigns are not settled yet: for the worker of any replica, at once, never sent again. */
  handOver(calls: readonly AnsweredCall[]): Promise<void>;
  /** Claims up to `limit` due calls for this replica, each whole. */
  claimDue(owner: string, leaseMs: number, limit: number): Promise<RecordedClaim | undefined>;
  /**
   * Gives back the calls of a claim that are still there, due after the capped backoff; `answered`
   * names those spend management has answered 200 meanwhile (with what is left to settle).
   */
  release(
    claimToken: string,
    answered: readonly AnsweredCall[],
    backoff: { baseMs: number; maxMs: number },
    lastError: string | null,
  ): Promise<void>;
}

export function createSentPauses(pool: DatabasePool, metrics: Metrics): SentPauses {
  const timed = postgresCall(metrics);
  return {
    forget: (callKeys) =>
      timed('forget_pause_calls', async () => {
        if (callKeys.length === 0) return;
        await pool.one(sql.type(countRow)`
          WITH forgotten AS (
            DELETE FROM pause_calls WHERE call_key = ANY(${uuidArray(callKeys)}) AND state = 'sent'
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM forgotten`);
      }),

    handOver: (calls) =>
      timed('hand_over_pause_calls', async () => {
        if (calls.length === 0) return;
        const { ids, keys } = pairs(calls);
        await pool.one(sql.type(countRow)`
          WITH handed AS (
            UPDATE pause_calls p
            SET state = 'answered', next_attempt_at = now(), claim_token = NULL, lease_owner = NULL,
                answered_ids = ARRAY(SELECT t.id FROM unnest(${ids}, ${keys}) AS t(id, k) WHERE t.k = p.call_key)
            WHERE p.call_key = ANY(${keys})
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM handed`);
      }),

    claimDue: (owner, leaseMs, limit) =>
      timed('claim_pause_calls', async () => {
        const claimToken = randomUUID();
        // ARRAY(...) makes the locking sub-select run once, so a claim never takes more than `limit`
        // calls; SKIP LOCKED lets replicas claim side by side.
        const rows = await pool.any(sql.type(claimedRow)`
          UPDATE pause_calls p
          SET attempts = p.attempts + 1, claim_token = ${claimToken}::uuid, lease_owner = ${owner},
              next_attempt_at = now() + ${seconds(leaseMs)}
          WHERE p.call_key = ANY (ARRAY(
                  SELECT d.call_key FROM pause_calls d
                  WHERE d.next_attempt_at <= now()
                  ORDER BY d.next_attempt_at
                  LIMIT ${limit}
                  FOR UPDATE SKIP LOCKED))
          RETURNING p.call_key::text AS call_key, p.agent_id, p.campaign_ids::text[] AS campaign_ids,
                    p.answered_ids::text[] AS answered_ids, p.sent_key::text AS sent_key,
                    p.sent_campaign_ids::text[] AS sent_campaign_ids,
                    (SELECT c.partner_name FROM agent_status_changes c
                      WHERE c.agent_id = p.agent_id AND NOT c.enabled
                      ORDER BY c.change_id DESC LIMIT 1) AS partner_name`);
        if (rows.length === 0) return undefined;
        const calls = rows.map((row) => ({
          agentId: row.agent_id,
          callKey: row.call_key,
          campaignIds: row.campaign_ids,
          answered: row.answered_ids ?? undefined,
          partnerName: row.partner_name ?? 'unknown',
          ...(row.sent_key && row.sent_campaign_ids ? { sentAs: { callKey: row.sent_key, campaignIds: row.sent_campaign_ids } } : {}),
        }));
        return { claimToken, calls };
      }),

    release: (claimToken, answered, backoff, lastError) =>
      timed('release_pause_calls', async () => {
        const { ids, keys } = pairs(answered);
        await pool.one(sql.type(countRow)`
          WITH released AS (
            UPDATE pause_calls p
            SET claim_token = NULL, lease_owner = NULL, last_error = coalesce(${lastError}, p.last_error),
                state = CASE WHEN p.call_key = ANY(${keys}) THEN 'answered' ELSE p.state END,
                answered_ids = CASE WHEN p.call_key = ANY(${keys})
                  THEN ARRAY(SELECT t.id FROM unnest(${ids}, ${keys}) AS t(id, k) WHERE t.k = p.call_key)
                  ELSE p.answered_ids END,
                next_attempt_at = now() + make_interval(secs => least(${backoff.maxMs}::float8,
                  ${backoff.baseMs}::float8 * power(2, least(p.attempts - 1, 20))) * (0.5 + random() / 2) / 1000)
            WHERE p.claim_token = ${claimToken}::uuid
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM released`);
      }),
  };
}
