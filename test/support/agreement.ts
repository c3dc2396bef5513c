import type { Cluster, Redis } from 'ioredis';
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
 * paused in spend management or Redis but running in the database. `redis` (one server or a
 * cluster) carries the run's key prefix; `isPausedInSpendManagement` reads the simulator.
 */
export async function disagreements(
  stores: { pool: pg.Pool; redis: Redis | Cluster; isPausedInSpendManagement: (campaignId: string) => boolean },
  campaignIds: readonly string[],
): Promise<CampaignStanding[]> {
  const { rows } = await stores.pool.query('SELECT campaign_id FROM campaigns WHERE campaign_id = ANY($1) AND paused', [campaignIds]);
  const inDatabase = new Set(rows.map((row) => row.campaign_id as string));
  // One command per key (a cluster's keys live in many slots); the client pipelines them. A key
  // that is not a hash (WRONGTYPE) is not paused.
  const inRedis = (await Promise.all(campaignIds.map((id) => stores.redis.hget(`campaign:${id}`, 'paused').catch(() => null)))).map(
    (value) => value === '1',
  );
  return campaignIds
    .map((campaignId, index) => ({
      campaignId,
      spendManagement: stores.isPausedInSpendManagement(campaignId),
      redis: inRedis[index]!,
      database: inDatabase.has(campaignId),
    }))
    .filter((c) => !(c.spendManagement === c.redis && c.redis === c.database));
}
