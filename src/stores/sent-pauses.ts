import { randomUUID } from 'node:crypto';
import { type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import type { Metrics } from '../observability/metrics.js';
import { postgresCall, seconds } from './postgres.js';

/** One pause call: the campaigns it names and its idempotency key. */
export interface SentBatch {
  campaignIds: readonly string[];
  callKey: string;
}

/** Recorded campaigns of one call, claimed by a replica's worker to be settled. */
export interface RecordedCall {
  agentId: string;
  callKey: string;
  /** Spend management answered these paused already: only Redis and the database are left. */
  confirmed: string[];
  /** The call's outcome is not known (the run stopped between the call and its record): sent again, with the same key. */
  inDoubt: string[];
  /** The label of the key that asked for the agent's latest disable (metrics only). */
  partnerName: string;
}

export interface RecordedClaim {
  claimToken: string;
  calls: RecordedCall[];
}

const claimedRow = z.object({
  campaign_id: z.string(),
  agent_id: z.string(),
  call_key: z.string(),
  confirmed: z.boolean(),
  partner_name: z.string().nullable(),
});
const countRow = z.object({ n: z.number() });

/**
 * The write-ahead record of pause calls (sent_pauses, docs/interfaces.md §9). The rows are written
 * by the claim check right before a call (src/stores/disable-queue.ts) and deleted by the statement
 * that marks the campaigns paused (src/stores/agent-repository.ts, markPaused): between the two, a row says
 * "this campaign may be paused in spend management and not yet in the database". Here: what a run
 * says about its rows when a call's outcome is known but not settled, and the worker's claims on
 * rows that nobody settles (their lease, next_attempt_at, ran out), with the usual backoff.
 */
export interface SentPauses {
  /** Campaigns of a call that was not sent after all, or that spend management left out: no longer in doubt. */
  forget(batch: SentBatch): Promise<void>;
  /** Campaigns spend management paused that are not settled yet: for the worker of any replica, at once. */
  handOver(campaignIds: readonly string[]): Promise<void>;
  /** Claims up to `limit` due rows for this replica, grouped by call. */
  claimDue(owner: string, leaseMs: number, limit: number): Promise<RecordedClaim | undefined>;
  /**
   * Gives back the rows of a claim that are still there, due after the capped backoff; `confirmed`
   * names those spend management has answered paused meanwhile.
   */
  release(
    claimToken: string,
    confirmed: readonly string[],
    backoff: { baseMs: number; maxMs: number },
    lastError: string | null,
  ): Promise<void>;
}

export function createSentPauses(pool: DatabasePool, metrics: Metrics): SentPauses {
  const timed = postgresCall(metrics);
  return {
    forget: (batch) =>
      timed('forget_sent_pauses', async () => {
        // Only the rows of this call (another call may have recorded a campaign since) that spend
        // management has not confirmed.
        await pool.one(sql.type(countRow)`
          WITH forgotten AS (
            DELETE FROM sent_pauses
            WHERE campaign_id = ANY(${sql.array(batch.campaignIds, 'uuid')}) AND call_key = ${batch.callKey}::uuid AND NOT confirmed
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM forgotten`);
      }),

    handOver: (campaignIds) =>
      timed('hand_over_sent_pauses', async () => {
        await pool.one(sql.type(countRow)`
          WITH handed AS (
            UPDATE sent_pauses SET confirmed = true, next_attempt_at = now(), claim_token = NULL, lease_owner = NULL
            WHERE campaign_id = ANY(${sql.array(campaignIds, 'uuid')})
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM handed`);
      }),

    claimDue: (owner, leaseMs, limit) =>
      timed('claim_sent_pauses', async () => {
        const claimToken = randomUUID();
        // ARRAY(...) makes the locking sub-select run once, so a claim never takes more than `limit`
        // rows; SKIP LOCKED lets replicas claim side by side.
        const rows = await pool.any(sql.type(claimedRow)`
          UPDATE sent_pauses s
          SET attempts = s.attempts + 1, claim_token = ${claimToken}::uuid, lease_owner = ${owner},
              next_attempt_at = now() + ${seconds(leaseMs)}
          WHERE s.campaign_id = ANY (ARRAY(
                  SELECT d.campaign_id FROM sent_pauses d
                  WHERE d.next_attempt_at <= now()
                  ORDER BY d.next_attempt_at
                  LIMIT ${limit}
                  FOR UPDATE SKIP LOCKED))
          RETURNING s.campaign_id::text AS campaign_id, s.agent_id, s.call_key::text AS call_key, s.confirmed,
                    (SELECT c.partner_name FROM agent_status_changes c
                      WHERE c.agent_id = s.agent_id AND NOT c.enabled
                      ORDER BY c.change_id DESC LIMIT 1) AS partner_name`);
        if (rows.length === 0) return undefined;
        const calls = new Map<string, RecordedCall>();
        for (const row of rows) {
          let call = calls.get(row.call_key);
          if (!call) {
            call = { agentId: row.agent_id, callKey: row.call_key, confirmed: [], inDoubt: [], partnerName: row.partner_name ?? 'unknown' };
            calls.set(row.call_key, call);
          }
          (row.confirmed ? call.confirmed : call.inDoubt).push(row.campaign_id);
        }
        return { claimToken, calls: [...calls.values()] };
      }),

    release: (claimToken, confirmed, backoff, lastError) =>
      timed('release_sent_pauses', async () => {
        await pool.one(sql.type(countRow)`
          WITH released AS (
            UPDATE sent_pauses
            SET claim_token = NULL, lease_owner = NULL, last_error = coalesce(${lastError}, last_error),
                confirmed = confirmed OR campaign_id = ANY(${sql.array(confirmed, 'uuid')}),
                next_attempt_at = now() + make_interval(secs => least(${backoff.maxMs}::float8,
                  ${backoff.baseMs}::float8 * power(2, least(attempts - 1, 20))) * (0.5 + random() / 2) / 1000)
            WHERE claim_token = ${claimToken}::uuid
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM released`);
      }),
  };
}
