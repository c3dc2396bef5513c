import type { Redis } from 'ioredis';
import type pg from 'pg';

/** Where one campaign stands in each of the three stores. */
export interface CampaignStanding {
  campaignId: string;
  spendManagement: boolean;
  redis: boolean;
  database: boolean;
}

/**
 * The campaigns of `campaignIds` on which the three stores do not agree (docs/interfaces.md §9: in
 * the end they agree on every campaign), both ways: paused in the database but not everywhere, and
 * paused in spend management or Redis but running in the database. `redis` carries the run's key
 * prefix; `isPausedInSpendManagement` reads the simulator.
 */
export async function disagreements(
  stores: { pool: pg.Pool; redis: Redis; isPausedInSpendManagement: (campaignId: string) => boolean },
  campaignIds: readonly string[],
): Promise<CampaignStanding[]> {
  const { rows } = await stores.pool.query('SELECT campaign_id FROM campaigns WHERE campaign_id = ANY($1) AND paused', [campaignIds]);
  const inDatabase = new Set(rows.map((row) => row.campaign_id as string));
  const read = stores.redis.pipeline();
  for (const id of campaignIds) read.hget(`campaign:${id}`, 'paused');
  const inRedis = ((await read.exec()) ?? []).map(([, value]) => value === '1');
  return campaignIds
    .map((campaignId, index) => ({
      campaignId,
      spendManagement: stores.isPausedInSpendManagement(campaignId),
      redis: inRedis[index]!,
      database: inDatabase.has(campaignId),
    }))
    .filter((c) => !(c.spendManagement === c.redis && c.redis === c.database));
}
