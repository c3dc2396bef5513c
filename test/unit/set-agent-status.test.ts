import { describe, expect, it } from 'vitest';
import { AgentNotInNetwork, createSetAgentStatus } from '../../src/agents/set-agent-status.js';
import type { AgentRepository } from '../../src/stores/database.js';
import { DependencyError } from '../../src/stores/dependency-error.js';

/**
 * The batching and ordering of a disable, on an in-memory repository that behaves like the SQL
 * (keyset pages over unpaused campaigns, conditional marking). The SQL itself is proven by the
 * integration tests against PostgreSQL.
 */
function world(campaignCount: number) {
  const campaigns = new Map(Array.from({ length: campaignCount }, (_, i) => [`c-${String(i).padStart(6, '0')}`, false]));
  const log: string[] = [];
  const page = (after: string, size: number) =>
    [...campaigns].filter(([id, paused]) => !paused && id > after).map(([id]) => id).sort().slice(0, size);
  const agents: AgentRepository = {
    approve: async (networkId) => networkId === 'n1',
    disapprove: async (networkId, _agentId, size) => {
      log.push('disapprove');
      return networkId === 'n1' ? { firstBatch: page('', size) } : undefined;
    },
    markPausedAndFetchNext: async (_agentId, batch, after, size) => {
      log.push(`db:${batch.length}`);
      let paused = 0;
      for (const id of batch) if (campaigns.get(id) === false) (campaigns.set(id, true), paused++);
      return { paused, next: page(after, size) };
    },
    ping: async () => undefined,
  };
  return { campaigns, log, agents };
}

describe('disable: batches of at most 100, spend management, then the key-value store, then the database', () => {
  it('pauses 250 campaigns in three ordered batches', async () => {
    const { log, agents, campaigns } = world(250);
    const setAgentStatus = createSetAgentStatus({
      agents,
      pauseSpending: async (ids) => void log.push(`spend:${ids.length}`),
      markPausedInStore: async (ids) => void log.push(`store:${ids.length}`),
    });
    const result = await setAgentStatus({ networkId: 'n1', agentId: 'a1', enabled: false });
    expect(result).toEqual({ agentId: 'a1', networkId: 'n1', enabled: false, pausedCampaignCount: 250 });
    expect(log).toEqual(['disapprove', 'spend:100', 'store:100', 'db:100', 'spend:100', 'store:100', 'db:100', 'spend:50', 'store:50', 'db:50']);
    expect([...campaigns.values()].every(Boolean)).toBe(true);
  });

  it('makes no remote call for an agent without campaigns', async () => {
    const { log, agents } = world(0);
    const setAgentStatus = createSetAgentStatus({ agents, pauseSpending: async () => void log.push('spend'), markPausedInStore: async () => void log.push('store') });
    expect((await setAgentStatus({ networkId: 'n1', agentId: 'a1', enabled: false })).pausedCampaignCount).toBe(0);
    expect(log).toEqual(['disapprove']);
  });

  it('stops at the first failing batch, marking nothing of it in the database', async () => {
    const { log, agents, campaigns } = world(250);
    let calls = 0;
    const setAgentStatus = createSetAgentStatus({
      agents,
      pauseSpending: async () => void log.push('spend'),
      markPausedInStore: async () => {
        if (++calls === 2) throw new DependencyError('redis', 'unavailable', 'down');
        log.push('store');
      },
    });
    await expect(setAgentStatus({ networkId: 'n1', agentId: 'a1', enabled: false })).rejects.toBeInstanceOf(DependencyError);
    expect(log).toEqual(['disapprove', 'spend', 'store', 'db:100', 'spend']);
    expect([...campaigns.values()].filter(Boolean)).toHaveLength(100);
  });

  it('never sends more than 100 ids, whatever batch size is asked for', async () => {
    const { agents } = world(300);
    const sizes: number[] = [];
    const setAgentStatus = createSetAgentStatus({ agents, batchSize: 500, pauseSpending: async (ids) => void sizes.push(ids.length), markPausedInStore: async () => undefined });
    await setAgentStatus({ networkId: 'n1', agentId: 'a1', enabled: false });
    expect(sizes).toEqual([100, 100, 100]);
  });
});

describe('enable and the 404', () => {
  it('enables without touching campaigns', async () => {
    const { log, agents } = world(10);
    const setAgentStatus = createSetAgentStatus({ agents, pauseSpending: async () => void log.push('spend'), markPausedInStore: async () => void log.push('store') });
    expect(await setAgentStatus({ networkId: 'n1', agentId: 'a1', enabled: true })).toEqual({ agentId: 'a1', networkId: 'n1', enabled: true, pausedCampaignCount: 0 });
    expect(log).toEqual([]);
  });

  it('throws AgentNotInNetwork for an agent outside the network, on enable and on disable', async () => {
    const { agents } = world(5);
    const setAgentStatus = createSetAgentStatus({ agents, pauseSpending: async () => undefined, markPausedInStore: async () => undefined });
    await expect(setAgentStatus({ networkId: 'n2', agentId: 'a1', enabled: true })).rejects.toBeInstanceOf(AgentNotInNetwork);
    await expect(setAgentStatus({ networkId: 'n2', agentId: 'a1', enabled: false })).rejects.toBeInstanceOf(AgentNotInNetwork);
  });
});
