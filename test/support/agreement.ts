import type { Cluster, Redis } from 'ioredis';
import type pg from 'pg';
import { expect } from 'vitest';
import type { TestDatabase } from './data.js';
import type { TestService } from './service.js';

/** Where one campaign stands in each of the three stores. */
export interface CampaignStanding {
  campaignId: string;
  spendManagement: boolean;
  redis: boolean;
  database: boolean;
}

/**
 * The three stores, as a test reads them: the database, Redis (one server or a cluster, with the
 * run's key prefix) and spend management (the simulator's record).
 */
export interface Stores {
  pool: pg.Pool;
  redis: Redis | Cluster;
  isPausedInSpendManagement: (campaignId: string) => boolean;
}

/** The stores of an in-process test service: the file's database, its Redis client and its simulator. */
export function serviceStores(db: TestDatabase, service: TestService): Stores {
  return { pool: db.pool, redis: service.redis, isPausedInSpendManagement: (id) => service.sim.isPaused(id) };
}

/** Where each campaign of `campaignIds` stands in the three stores, in the order given. */
export async function standings(stores: Stores, campaignIds: readonly string[]): Promise<CampaignStanding[]> {
  const { rows } = await stores.pool.query('SELECT campaign_id FROM campaigns WHERE campaign_id = ANY($1) AND paused', [campaignIds]);
  const inDatabase = new Set(rows.map((row) => row.campaign_id as string));
  // One command per key (a cluster's keys live in many slots); the client pipelines them. A key
  // that is not a hash (WRONGTYPE) is not paused.
  const inRedis = (await Promise.all(campaignIds.map((id) => stores.redis.hget(`campaign:${id}`, 'paused').catch(() => null)))).map(
    (value) => value === '1',
  );
  return campaignIds.map((campaignId, index) => ({
    campaignId,
    spendManagement: stores.isPausedInSpendManagement(campaignId),
    redis: inRedis[index]!,
    database: inDatabase.has(campaignId),
  }));
}

/**
 * The campaigns of `campaignIds` on which the three stores do not agree (docs/interfaces.md §9: in
 * the end they agree on every campaign), both ways: paused in the database but not everywhere, and
 * paused in spend management or Redis but running in the database.
 */
export async function disagreements(stores: Stores, campaignIds: readonly string[]): Promise<CampaignStanding[]> {
  return (await standings(stores, campaignIds)).filter((c) => !(c.spendManagement === c.redis && c.redis === c.database));
}

/**
 * docs/interfaces.md §7, at any moment (not only in the end): a campaign of `campaignIds` paused in
 * the database is paused in spend management and in Redis. Fails naming the campaigns that are not.
 */
export async function expectPausedInDatabaseImpliesEverywhere(stores: Stores, campaignIds: readonly string[]): Promise<void> {
  const pausedOnlyPartly = (await standings(stores, campaignIds)).filter((c) => c.database && !(c.spendManagement && c.redis));
  expect(pausedOnlyPartly, 'paused in the database but not in spend management or not in Redis').toEqual([]);
}
