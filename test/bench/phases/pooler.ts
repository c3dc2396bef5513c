// The service behind PgBouncer in transaction mode (`--only=pooler`, docs/interfaces.md §13): a
// PgBouncer 1.18 for the phase in front of the run's database (the service's pooled connections share
// its server connections), a service process with DATABASE_POOLER=transaction, and the same enable
// load and 10,000-campaign disable (spend management at 25 ms a call) as straight to PostgreSQL, so
// that the two stand side by side in one run.
import pg from 'pg';
import { startPgBouncer } from '../../support/pgbouncer.js';
import type { BenchContext } from '../context.js';
import { topologyFigures } from './cluster.js';

/** PgBouncer's server connections: what the service's one replica gets of PostgreSQL through it. */
const serverConnections = 16;

export async function poolerPhase(ctx: BenchContext): Promise<void> {
  // The role's time-outs, as docs/operations.md asks of the SRE behind a pooler.
  for (const setting of ['statement_timeout', 'idle_in_transaction_session_timeout']) {
    await ctx.db.query(`ALTER ROLE postgres IN DATABASE ${pg.escapeIdentifier(ctx.database)} SET ${setting} = 5000`);
  }
  const bouncer = await startPgBouncer(ctx.databaseUrl, { poolSize: serverConnections });
  try {
    await topologyFigures(ctx, {
      name: 'through PgBouncer (transaction mode)',
      service: 'service-pooler',
      env: { DATABASE_URL: bouncer.url, DATABASE_POOLER: 'transaction' },
      enableFigure: 'enable, through PgBouncer',
    });
  } finally {
    await bouncer.close();
  }
}
