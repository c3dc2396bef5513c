import { randomUUID } from 'node:crypto';
import type { AgentRepository, Lease } from '../../src/stores/agent-repository.js';
import type { DisableQueue } from '../../src/stores/disable-queue.js';
import type { SentPauses } from '../../src/stores/sent-pauses.js';

interface Campaign {
  agentId: string;
  active: boolean;
  paused: boolean;
}

interface Pending {
  claimToken: string | null;
  leaseUntil: number;
  attempts: number;
  lastError: string | null;
}

/**
 * The agent statements and the pending-disables queue over plain maps, with the same rules as the
 * SQL (network check, claim fencing, lease expiry, a row locked by "another transaction"), so that
 * the disable protocol's decisions can be unit-tested with no database. Not a model of
 * concurrency inside PostgreSQL: each method runs at once, as one statement would, atomically.
 */
export function inMemoryStores() {
  const agents = new Map<string, { networkId: string; approved: boolean }>();
  const campaigns = new Map<string, Campaign>();
  const pending = new Map<string, Pending>();
  const changes: Array<{ changeId: number; agentId: string; enabled: boolean }> = [];
  const lockedAgents = new Set<string>();
  /** The call record (pause_calls): call key → its campaigns, and what its 200 named that is not settled. */
  const recorded = new Map<string, { agentId: string; campaignIds: string[]; answered: string[] | undefined }>();
  const statements: string[] = [];
  const now = () => Date.now();

  const unpaused = (agentId: string) =>
    [...campaigns.entries()]
      .filter(([, c]) => c.agentId === agentId && c.active && !c.paused)
      .map(([id]) => id)
      .sort();
  const held = (agentId: string, token: string) => {
    const row = pending.get(agentId);
    return row !== undefined && row.claimToken === token && row.leaseUntil > now();
  };
  const claimable = (row: Pending) => row.claimToken === null || row.leaseUntil <= now();

  const repository: AgentRepository = {
    async enable(networkId, agentId) {
      statements.push('enable_agent');
      const agent = agents.get(agentId);
      if (!agent || agent.networkId !== networkId) return false;
      agent.approved = true;
      const supersededDisable = pending.delete(agentId);
      changes.push({ changeId: changes.length + 1, agentId, enabled: true });
      return { supersededDisable };
    },
    async disable(networkId, agentId, _author, lease, batchSize) {
      statements.push('disable_agent');
      const agent = agents.get(agentId);
      if (!agent || agent.networkId !== networkId) return undefined;
      const flagged = !lockedAgents.has(agentId);
      if (flagged) agent.approved = false;
      const existing = pending.get(agentId);
      let claimed = false;
      if (!existing) {
        pending.set(agentId, { claimToken: lease.claimToken, leaseUntil: now() + lease.leaseMs, attempts: 1, lastError: null });
        claimed = true;
      } else if (claimable(existing)) {
        Object.assign(existing, { claimToken: lease.claimToken, leaseUntil: now() + lease.leaseMs, attempts: existing.attempts + 1 });
        claimed = true;
      }
      changes.push({ changeId: changes.length + 1, agentId, enabled: false });
      const left = unpaused(agentId);
      return {
        changeId: String(changes.length),
        claimed,
        flagged,
        firstBatch: flagged ? left.slice(0, batchSize) : [],
        unpaused: left.length,
      };
    },
    async readStatus(networkId, agentId) {
      const agent = agents.get(agentId);
      if (!agent || agent.networkId !== networkId) return undefined;
      return {
        agentId,
        networkId,
        enabled: agent.approved,
        activeUnpausedCampaignCount: unpaused(agentId).length,
        disableInProgress: pending.has(agentId),
        latestChangeId: String(changes.findLast((change) => change.agentId === agentId)?.changeId ?? 0),
      };
    },
    async statusChanges(networkId, agentId, before, limit) {
      const agent = agents.get(agentId);
      if (!agent || agent.networkId !== networkId) return undefined;
      return changes
        .filter((change) => change.agentId === agentId && (before === null || change.changeId < Number(before)))
        .reverse()
        .slice(0, limit)
        .map((change) => ({
          changeId: String(change.changeId),
          enabled: change.enabled,
          partnerName: 'in-memory',
          requestId: null,
          changedAt: new Date(0).toISOString(),
        }));
    },
    async nextBatch(agentId, after, batchSize) {
      statements.push('next_campaign_batch');
      return unpaused(agentId)
        .filter((id) => after === null || id > after)
        .slice(0, batchSize);
    },
    async markPaused(agentId, campaignIds, claim: Lease, finish, settledCalls = []) {
      statements.push('mark_campaigns_paused');
      for (const key of settledCalls) recorded.delete(key);
      let moved = 0;
      for (const id of campaignIds) {
        const campaign = campaigns.get(id);
        if (campaign && !campaign.paused) {
          campaign.paused = true;
          moved += 1;
        }
      }
      let finished = false;
      if (finish && held(agentId, claim.claimToken) && unpaused(agentId).length === 0) {
        pending.delete(agentId);
        finished = true;
      } else if (held(agentId, claim.claimToken)) {
        pending.get(agentId)!.leaseUntil = now() + claim.leaseMs;
      }
      return { moved, skipped: [], finished };
    },
    async remainingCampaigns(agentId) {
      return unpaused(agentId).length;
    },
    async ping() {
      return 'writable' as const;
    },
  };

  const queue: DisableQueue = {
    async checkClaim(agentId, lease, renew, sent) {
      statements.push(renew ? 'renew_lease' : 'check_claim');
      if (!held(agentId, lease.claimToken)) return false;
      if (renew) pending.get(agentId)!.leaseUntil = now() + lease.leaseMs;
      for (const batch of sent) {
        if (!recorded.has(batch.callKey))
          recorded.set(batch.callKey, { agentId, campaignIds: [...batch.campaignIds], answered: undefined });
      }
      return true;
    },
    async checkSharedClaims(parts) {
      statements.push('check_shared_claims');
      const ours = new Set<string>();
      for (const part of parts) {
        if (!held(part.agentId, part.lease.claimToken)) continue;
        ours.add(part.agentId);
        if (part.renew) pending.get(part.agentId)!.leaseUntil = now() + part.lease.leaseMs;
        const { callKey, campaignIds } = part.batch;
        if (!recorded.has(callKey)) recorded.set(callKey, { agentId: part.agentId, campaignIds: [...campaignIds], answered: undefined });
      }
      return ours;
    },
    async setFlag(agentId, claimToken) {
      statements.push('set_agent_flag');
      if (!held(agentId, claimToken)) return { held: false, flagged: false };
      if (lockedAgents.has(agentId)) return { held: true, flagged: false };
      agents.get(agentId)!.approved = false;
      return { held: true, flagged: true };
    },
    async finish(agentId, claimToken) {
      statements.push('finish_disable');
      if (pending.get(agentId)?.claimToken !== claimToken || unpaused(agentId).length > 0) return false;
      pending.delete(agentId);
      return true;
    },
    async release(agentId, claimToken, _when, lastError) {
      const row = pending.get(agentId);
      if (!row || row.claimToken !== claimToken) return false;
      Object.assign(row, { claimToken: null, leaseUntil: now(), lastError: lastError ?? row.lastError });
      return true;
    },
    async takeOver(agentId, lease) {
      const row = pending.get(agentId);
      if (!row) return { claimed: false, pending: false };
      if (!claimable(row)) return { claimed: false, pending: true };
      Object.assign(row, { claimToken: lease.claimToken, leaseUntil: now() + lease.leaseMs, attempts: row.attempts + 1 });
      return { claimed: true, pending: true };
    },
    async enabledSince(agentId, changeId) {
      return changes.some((change) => change.agentId === agentId && change.enabled && change.changeId > Number(changeId));
    },
    async claimDue() {
      return [];
    },
    async releaseOwned() {
      return { disables: 0, campaigns: 0 };
    },
    async pendingStats() {
      return { count: pending.size, oldestAgeSeconds: 0, unsettled: { count: recorded.size, oldestAgeSeconds: 0 } };
    },
  };

  // The call record as a run uses it; the worker's claims are the SQL's business.
  const sentPauses: SentPauses = {
    async forget(callKeys) {
      for (const key of callKeys) if (recorded.get(key)?.answered === undefined) recorded.delete(key);
    },
    async handOver(calls) {
      for (const call of calls) {
        const row = recorded.get(call.callKey);
        if (row) row.answered = [...call.unsettled];
      }
    },
    async claimDue() {
      return undefined;
    },
    async release() {},
  };

  return {
    agents: repository,
    queue,
    sentPauses,
    /** The write-ahead record's rows, by campaign. */
    recorded,
    /** Every statement run, by name, in order. */
    statements,
    pending,
    lockedAgents,
    seed(networkId: string, campaignCount: number): { agentId: string; campaignIds: string[] } {
      const agentId = `us-east-1:${randomUUID()}`;
      agents.set(agentId, { networkId, approved: true });
      const campaignIds = Array.from({ length: campaignCount }, () => randomUUID());
      for (const id of campaignIds) campaigns.set(id, { agentId, active: true, paused: false });
      return { agentId, campaignIds };
    },
    approved: (agentId: string) => agents.get(agentId)!.approved,
    pausedCount: (agentId: string) => [...campaigns.values()].filter((c) => c.agentId === agentId && c.paused).length,
  };
}
