// One floor of `npm run bench` (docs/interfaces.md §8), in its own process: FLOOR selects which.
// - bare:   a bare Fastify route, logger off;
// - pg:     `SELECT 1` through node-postgres;
// - slonik: `SELECT 1` through slonik configured as the service configures it (createDatabasePool);
// - update: the enable's statement before durable disables (the flag alone), through node-postgres;
// - enable: the enable's whole work at its leanest: the key looked up in a map, the body checked by
//   a schema, one Redis round trip for the per-network rate limit (INCR, PEXPIRE on the first hit,
//   one EVALSHA), then the durable enable statement (flag, pending row deleted, change row
//   appended) through node-postgres.
// GET /readyz answers 200 once the floor listens.
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import pg from 'pg';
import { sql } from 'slonik';
import { z } from 'zod';
import { createDatabasePool } from '../../src/stores/postgres.js';

const floor = process.env.FLOOR ?? '';
const databaseUrl = process.env.DATABASE_URL ?? '';
const poolSize = Number(process.env.DATABASE_POOL_SIZE ?? 10);
const app = Fastify({ logger: false });
const closers: Array<() => Promise<unknown>> = [];

const enableBody = {
  type: 'object',
  additionalProperties: false,
  required: ['agentId', 'enabled'],
  properties: {
    agentId: { type: 'string', pattern: '^us-east-1:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' },
    enabled: { type: 'boolean' },
  },
} as const;

/** FLOOR_KEYS: JSON {"<key>": {"networkId", "name"}}, the partner keys the enable floors accept. */
function partnerKeys(): Map<string, { networkId: string; name: string }> {
  return new Map(Object.entries(JSON.parse(process.env.FLOOR_KEYS ?? '{}') as Record<string, { networkId: string; name: string }>));
}

function nodePostgres(): pg.Pool {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: poolSize });
  closers.push(() => pool.end());
  return pool;
}

type EnableBody = { agentId: string; enabled: boolean };

switch (floor) {
  case 'bare':
    app.get('/floor', async () => ({ ok: true }));
    break;
  case 'pg': {
    const pool = nodePostgres();
    app.get('/floor', async () => ({ one: (await pool.query('SELECT 1 AS one')).rows[0].one }));
    break;
  }
  case 'slonik': {
    // As the service's request pool: a statement waits for a connection at most the request
    // deadline (REQUEST_DEADLINE_MS, 25 s by default), not the worker pools' statement bound.
    const pool = await createDatabasePool({ url: databaseUrl, maxPoolSize: poolSize, statementTimeoutMs: 5_000, maxWaitMs: 25_000 });
    closers.push(() => pool.end());
    const one = z.object({ one: z.number() });
    app.get('/floor', async () => ({ one: await pool.oneFirst(sql.type(one)`SELECT 1 AS one`) }));
    break;
  }
  case 'update': {
    const pool = nodePostgres();
    const keys = partnerKeys();
    app.post<{ Body: EnableBody }>('/floor', { schema: { body: enableBody } }, async (request, reply) => {
      const partner = keys.get(String(request.headers['x-api-key']));
      if (!partner) return reply.code(401).send({ status: 401 });
      const { rowCount } = await pool.query('UPDATE agents SET agent_approved = true WHERE agent_id = $1 AND network_id = $2::uuid', [
        request.body.agentId,
        partner.networkId,
      ]);
      if (rowCount !== 1) return reply.code(404).send({ status: 404 });
      return { agentId: request.body.agentId, networkId: partner.networkId, enabled: true, pausedCampaignCount: 0 };
    });
    break;
  }
  case 'enable': {
    const pool = nodePostgres();
    const keys = partnerKeys();
    const max = Number(process.env.RATE_LIMIT_MAX ?? 10_000_000);
    const windowMs = Number(process.env.RATE_LIMIT_WINDOW_MS ?? 60_000);
    const redis = new Redis(process.env.REDIS_URL ?? '', { keyPrefix: process.env.REDIS_KEY_PREFIX ?? '' });
    closers.push(() => redis.quit());
    // ioredis sends a defined command as EVALSHA (EVAL only the first time the script is unknown).
    redis.defineCommand('hit', {
      numberOfKeys: 1,
      lua: "local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end return {n, redis.call('PTTL', KEYS[1])}",
    });
    const hit = (redis as unknown as { hit(key: string, windowMs: number): Promise<[number, number]> }).hit.bind(redis);
    await hit('rate:warm', windowMs);
    app.post<{ Body: EnableBody }>('/floor', { schema: { body: enableBody } }, async (request, reply) => {
      const partner = keys.get(String(request.headers['x-api-key']));
      if (!partner) return reply.code(401).send({ status: 401 });
      const [count, ttlMs] = await hit(`rate:${partner.networkId}`, windowMs);
      if (count > max)
        return reply
          .code(429)
          .header('retry-after', Math.ceil(ttlMs / 1000))
          .send({ status: 429 });
      const { rowCount } = await pool.query(
        `WITH agent AS (UPDATE agents SET agent_approved = true WHERE agent_id = $1 AND network_id = $2::uuid
                        RETURNING agent_id, network_id),
              cleared AS (DELETE FROM pending_disables p USING agent WHERE p.agent_id = agent.agent_id),
              change AS (INSERT INTO agent_status_changes (agent_id, network_id, enabled, partner_name, request_id)
                         SELECT agent_id, network_id, true, $3, $4 FROM agent)
         SELECT 1 AS one FROM agent`,
        [request.body.agentId, partner.networkId, partner.name, request.id],
      );
      if (rowCount !== 1) return reply.code(404).send({ status: 404 });
      return { agentId: request.body.agentId, networkId: partner.networkId, enabled: true, pausedCampaignCount: 0 };
    });
    break;
  }
  default:
    throw new Error(`FLOOR must be bare, pg, slonik, update or enable; got "${floor}"`);
}

app.get('/readyz', async () => ({ ok: true }));
await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });
process.once('SIGTERM', () => {
  void app
    .close()
    .then(() => Promise.all(closers.map((close) => close())))
    .then(() => process.exit(0));
});
