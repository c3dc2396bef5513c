import type { CampaignStateStore } from '../stores/campaign-state.js';

/**
 * The key-value store's stand-in for `npm run dev` only: the same contract as the Redis store
 * (hash per campaign, `paused` = `1`), kept in this process so dev needs no Redis server.
 * Production and every test use Redis itself.
 */
export function createInMemoryCampaignState(): CampaignStateStore & { hash(campaignId: string): Record<string, string> | undefined } {
  const hashes = new Map<string, Record<string, string>>();
  return {
    async markPaused(campaignIds) {
      for (const id of campaignIds) hashes.set(id, { ...hashes.get(id), paused: '1' });
      return { confirmed: [...campaignIds] };
    },
    async close() {},
    hash: (campaignId) => hashes.get(campaignId),
  };
}
