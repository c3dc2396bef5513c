// The floors the service is measured against (CONTRACT.md section 8), in their own process:
// a bare Fastify route, `SELECT 1` through node-postgres directly, and `SELECT 1` through slonik
// configured exactly as the service configures it.
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
await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });
process.stdout.write('ready\n');
process.once('SIGTERM', async () => {
  await app.close();
  await Promise.all([pgPool.end(), slonik.end()]);
  process.exit(0);
});
