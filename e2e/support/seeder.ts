import { Redis } from 'ioredis';
import pg from 'pg';
import { insertAgent, insertCampaigns, insertNetwork } from '../../test/support/platform-rows.js';

/**
 * Makes and reads back the platform's data the way the platform itself would: straight in
 * PostgreSQL (the tables of docs/interfaces.md §5) and Redis (hash `campaign:<id>` under the
 * service's key prefix). Nothing here goes through the service. Locally the database is the run's
 * own; in the kind cluster it is the port-forwarded PostgreSQL (k8s-dev/port-forward.sh).
 */
export class Seeder {
  readonly pool: pg.Pool;
  readonly redis: Redis;

  constructor(options: { databaseUrl: string; redisUrl: string; redisKeyPrefix: string }) {
    this.pool = new pg.Pool({ connectionString: options.databaseUrl, max: 3, application_name: 'partner-agent-status-e2e' });
    // A connection that drops while idle must not crash the worker.
    this.pool.on('error', () => undefined);
    this.redis = new Redis(options.redisUrl, {
      keyPrefix: options.redisKeyPrefix,
      protocol: 2,
      lazyConnect: true,
      maxRetriesPerRequest: 2,
    });
    this.redis.on('error', () => undefined); // failures surface through the commands
  }

  network(options: { requireAgentApproval?: boolean } = {}): Promise<string> {
    return insertNetwork(this.pool, options);
  }

  agent(networkId: string, options: { approved?: boolean } = {}): Promise<string> {
    return insertAgent(this.pool, networkId, options);
  }

  campaigns(agentId: string, count: number, options: { active?: boolean; paused?: boolean } = {}): Promise<string[]> {
    return insertCampaigns(this.pool, agentId, count, options);
  }

  async agentApproved(agentId: string): Promise<boolean> {
    const { rows } = await this.pool.query<{ agent_approved: boolean }>('SELECT agent_approved FROM agents WHERE agent_id = $1', [agentId]);
    if (rows.length === 0) throw new Error(`agent ${agentId} does not exist`);
    return rows[0]!.agent_approved;
  }

  /** Campaign ids of the agent that are paused in PostgreSQL, sorted. */
  async pausedInDatabase(agentId: string): Promise<string[]> {
    const { rows } = await this.pool.query<{ campaign_id: string }>(
      'SELECT campaign_id FROM campaigns WHERE agent_id = $1 AND paused ORDER BY campaign_id',
      [agentId],
    );
    return rows.map((row) => row.campaign_id);
  }

  /** The ids among `campaignIds` that are paused in PostgreSQL, in input order. */
  async pausedInDatabaseAmong(campaignIds: string[]): Promise<string[]> {
    if (campaignIds.length === 0) return [];
    const { rows } = await this.pool.query<{ campaign_id: string }>(
      'SELECT campaign_id FROM campaigns WHERE campaign_id = ANY($1::uuid[]) AND paused',
      [campaignIds],
    );
    const paused = new Set(rows.map((row) => row.campaign_id));
    return campaignIds.filter((id) => paused.has(id));
  }

  /** The platform's own check for bulk leads, transfers, groups and deposits. */
  async isRestricted(agentId: string): Promise<boolean> {
    const { rows } = await this.pool.query<{ restricted: boolean }>('SELECT agent_is_restricted($1) AS restricted', [agentId]);
    return rows[0]!.restricted;
  }

  /** What a manager or the agent would do to resume a campaign: a plain UPDATE. */
  async unpause(campaignId: string): Promise<void> {
    await this.pool.query('UPDATE campaigns SET paused = false WHERE campaign_id = $1', [campaignId]);
  }

  /** The campaign's hash in Redis; {} when there is none. */
  async campaignHash(campaignId: string): Promise<Record<string, string>> {
    return this.redis.hgetall(`campaign:${campaignId}`);
  }

  async setCampaignHash(campaignId: string, fields: Record<string, string>): Promise<void> {
    await this.redis.hset(`campaign:${campaignId}`, fields);
  }

  /** The ids among `campaignIds` whose Redis hash says paused (`paused` = `1`), in input order. */
  async pausedInRedis(campaignIds: string[]): Promise<string[]> {
    if (campaignIds.length === 0) return [];
    const pipeline = this.redis.pipeline();
    for (const id of campaignIds) pipeline.hget(`campaign:${id}`, 'paused');
    const results = (await pipeline.exec()) ?? [];
    return campaignIds.filter((_id, index) => results[index]?.[1] === '1');
  }

  /**
   * Deletes everything of these networks: campaigns, agents, the networks, and the campaigns'
   * Redis hashes. For a worker's clean-up against a long-lived database (the kind cluster).
   */
  async deleteNetworks(networkIds: string[]): Promise<void> {
    if (networkIds.length === 0) return;
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      const { rows } = await client.query<{ campaign_id: string }>(
        `DELETE FROM campaigns WHERE agent_id IN (SELECT agent_id FROM agents WHERE network_id = ANY($1::uuid[]))
         RETURNING campaign_id`,
        [networkIds],
      );
      await client.query('DELETE FROM agents WHERE network_id = ANY($1::uuid[])', [networkIds]);
      await client.query('DELETE FROM networks WHERE network_id = ANY($1::uuid[])', [networkIds]);
      await client.query('COMMIT');
      const keys = rows.map((row) => `campaign:${row.campaign_id}`);
      for (let start = 0; start < keys.length; start += 500) await this.redis.del(...keys.slice(start, start + 500));
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    } finally {
      client.release();
    }
  }

  async close(): Promise<void> {
    await Promise.allSettled([this.pool.end(), this.redis.quit()]);
  }
}
