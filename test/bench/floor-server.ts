// The floors the service is measured against (CONTRACT.md section 8), in their own process:
// a bare Fastify route, `SELECT 1` through node-postgres directly, `SELECT 1` through slonik
// configured exactly as the service configures it, and (beyond the contract) the enable's own
// UPDATE through that pool, so the enable can be compared with the cost of its one statement.
import Fastify from 'fastify';
import pg from 'pg';
import { sql } from 'slonik';
import { z } from 'zod';
import { createDatabasePool } from '../../src/stores/database.js';

const databaseUrl = process.env.DATABASE_URL!;
const poolSize = Number(process.env.DATABASE_POOL_SIZE ?? 10);
const pgPool = new pg.Pool({ connectionString: databaseUrl, max: poolSize });
const slonik = await createDatabasePool({ url: databaseUrl, maxPoolSize: poolSize, statementTimeoutMs: 5_000 });
const one = z.object({ one: z.number() });

const app = Fastify({ logger: false });
app.get('/bare', async () => ({ ok: true }));
app.get('/pg', async () => ({ one: (await pgPool.query('SELECT 1 AS one')).rows[0].one }));
app.get('/slonik', async () => ({ one: await slonik.oneFirst(sql.type(one)`SELECT 1 AS one`) }));
const agents = (process.env.BENCH_AGENTS ?? '').split(',');
let next = 0;
app.get('/slonik-update', async () => ({
  one: await slonik.oneFirst(sql.type(one)`UPDATE agents SET agent_approved = true WHERE agent_id = ${agents[next++ % agents.length]!} RETURNING 1 AS one`),
}));
await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });
process.stdout.write('ready\n');
process.once('SIGTERM', async () => {
  await app.close();
  await Promise.all([pgPool.end(), slonik.end()]);
  process.exit(0);
});
