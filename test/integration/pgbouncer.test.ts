// DATABASE_POOLER=transaction (docs/interfaces.md §13): the service behind a real PgBouncer 1.18
// (Debian's, no protocol-level prepared statements) in transaction pooling mode, with four server
// connections for the service's twelve pooled clients, so that consecutive statements of one client
// really run on different server connections. PgBouncer refuses any startup parameter it does not
// track (no ignore_startup_parameters): the service sends no session setting. The statements are
// bounded by the role's own settings, as docs/operations.md tells the SRE to set them.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { databaseUrl } from '../support/database-url.js';
import { urls } from '../support/partner.js';
import { startPgBouncer } from '../support/pgbouncer.js';
import { startTestService, type TestService } from '../support/service.js';

const db = testDatabase();
const key = newApiKey();
const statementTimeoutMs = 2_000;
let bouncer: Awaited<ReturnType<typeof startPgBouncer>>;
let svc: TestService;
let networkId: string;

beforeAll(async () => {
  const database = new URL(databaseUrl()).pathname.slice(1);
  // What docs/operations.md asks of the SRE: the bounds on the service's role, for every session.
  for (const setting of ['statement_timeout', 'idle_in_transaction_session_timeout']) {
    await db.pool.query(`ALTER ROLE postgres IN DATABASE ${pg.escapeIdentifier(database)} SET ${setting} = ${statementTimeoutMs}`);
  }
  bouncer = await startPgBouncer(databaseUrl(), { poolSize: 4 });
  networkId = await db.network();
  svc = await startTestService({
    partners: [{ key, networkId, name: 'pooled' }],
    env: {
      DATABASE_URL: bouncer.url,
      DATABASE_POOLER: 'transaction',
      DATABASE_STATEMENT_TIMEOUT_MS: String(statementTimeoutMs),
      DISABLES_IN_FLIGHT_PER_NETWORK: '16',
      // The claim checks' answers on a busy machine (the in-process service shares the test's event
      // loop) may come later than the 1 s default: not what this file tests.
      CLAIM_CHECK_MAX_AGE_MS: '3000',
      WORKER_POLL_INTERVAL_MS: '60000',
      WORKER_BACKOFF_BASE_MS: '10',
      WORKER_BACKOFF_MAX_MS: '20',
    },
  });
}, 60_000);

afterAll(async () => {
  await svc?.close();
  await bouncer?.close();
  await db.close();
});

const post = (agentId: string, enabled: boolean, headers: Record<string, string> = {}) => svc.setStatus(key, agentId, enabled, headers);
const get = (url: string) => svc.app.inject({ method: 'GET', url, headers: { 'x-api-key': key } });

/** Every dependency failure the service logged since `from` (log line index). */
const failuresSince = (from: number) =>
  svc.logs
    .records()
    .slice(from)
    .filter((line) => line.msg === 'dependency failure' || (line.msg === 'request completed' && Number(line.statusCode) >= 500));

/** Server connections PgBouncer holds to PostgreSQL for the test's database. */
async function serverConnections(): Promise<number> {
  const database = new URL(databaseUrl()).pathname.slice(1);
  return (await bouncer.show('SERVERS')).filter((row) => row.database === database).length;
}

describe('behind PgBouncer in transaction mode', () => {
  it('starts with no warning: the role bounds every statement', () => {
    expect(svc.logs.records().some((line) => String(line.msg).includes('does not bound statements'))).toBe(false);
  });

  it('disables an agent of 2,500 campaigns in one request, on four shared server connections', async () => {
    const from = svc.logs.lines.length;
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 2_500);
    const response = await post(agentId, false);
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toMatchObject({ enabled: false, pausedCampaignCount: 2_500 });
    expect((await db.pausedIds(agentId)).size).toBe(2_500);
    expect(await db.agentApproved(agentId)).toBe(false);
    const { rowCount } = await db.pool.query('SELECT 1 FROM pending_disables WHERE agent_id = $1', [agentId]);
    expect(rowCount).toBe(0);
    expect(failuresSince(from)).toEqual([]);
    expect(await serverConnections()).toBeLessThanOrEqual(4);
  });

  it('twelve concurrent disables, their repeats with an Idempotency-Key, status reads, enables and the history: no 500', async () => {
    const from = svc.logs.lines.length;
    const agents = await Promise.all(Array.from({ length: 12 }, () => db.agent(networkId)));
    for (const agentId of agents) await db.campaigns(agentId, 150);
    const toEnable = await Promise.all(Array.from({ length: 4 }, () => db.agent(networkId, { approved: false })));
    const keys = agents.map(() => randomUUID());

    const [disables, reads, enables] = await Promise.all([
      Promise.all(agents.map((agentId, i) => post(agentId, false, { 'idempotency-key': keys[i]! }))),
      Promise.all(agents.map((agentId) => get(urls.agentStatus(agentId)))),
      Promise.all(toEnable.map((agentId) => post(agentId, true))),
    ]);
    for (const response of [...disables, ...reads, ...enables]) expect(response.statusCode, response.body).toBe(200);
    expect(disables.map((response) => response.json().pausedCampaignCount)).toEqual(agents.map(() => 150));

    // Repeats: with the same key, replayed; without one, nothing left to pause.
    const [replays, repeats] = await Promise.all([
      Promise.all(agents.map((agentId, i) => post(agentId, false, { 'idempotency-key': keys[i]! }))),
      Promise.all(agents.map((agentId) => post(agentId, false))),
    ]);
    for (const [i, replay] of replays.entries()) {
      expect(replay.statusCode).toBe(200);
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(replay.json()).toEqual(disables[i]!.json());
    }
    for (const repeat of repeats) expect(repeat.json()).toMatchObject({ enabled: false, pausedCampaignCount: 0 });

    const statuses = await Promise.all(agents.map((agentId) => get(urls.agentStatus(agentId))));
    for (const status of statuses) {
      expect(status.json()).toMatchObject({ enabled: false, activeUnpausedCampaignCount: 0, disableInProgress: false });
    }
    const histories = await Promise.all(agents.map((agentId) => get(urls.statusChanges(agentId))));
    for (const history of histories) {
      expect(history.statusCode).toBe(200);
      // The disable and its repeat without a key (the replay appended nothing), newest first.
      expect(history.json().changes.map((c: { changeId: number; enabled: boolean }) => [c.changeId, c.enabled])).toEqual([
        [2, false],
        [1, false],
      ]);
    }
    for (const agentId of toEnable) expect(await db.agentApproved(agentId)).toBe(true);
    expect(failuresSince(from)).toEqual([]);
    expect(await serverConnections()).toBeLessThanOrEqual(4);
  });

  it('a conditional change (If-Match) runs as one explicit transaction block through the pooler', async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 3);
    const etag = (await get(urls.agentStatus(agentId))).headers.etag as string;
    const [first, second] = await Promise.all([post(agentId, false, { 'if-match': etag }), post(agentId, false, { 'if-match': etag })]);
    expect([first.statusCode, second.statusCode].sort()).toEqual([200, 412]);
  });

  it('a disable the worker completes, once spend management confirms the campaign it left out', async () => {
    const from = svc.logs.lines.length;
    const agentId = await db.agent(networkId);
    const ids = await db.campaigns(agentId, 300);
    svc.sim.refuse([ids[123]!]);
    try {
      const response = await post(agentId, false);
      expect(response.statusCode).toBe(500);
      expect(response.json()).toMatchObject({ pausedCampaignCount: 299, remainingCampaignCount: 1 });
    } finally {
      svc.sim.refuse([]);
    }
    // The one 500 is spend management's answer about one campaign, not the pooler.
    expect(failuresSince(from).filter((line) => line.msg === 'dependency failure')).toEqual([
      expect.objectContaining({ dependency: 'spend_management', reason: 'not_confirmed' }),
    ]);
    await vi.waitFor(
      async () => {
        await svc.service.worker.pollNow();
        await svc.service.worker.drained();
        const { rowCount } = await db.pool.query('SELECT 1 FROM pending_disables WHERE agent_id = $1', [agentId]);
        expect(rowCount).toBe(0);
      },
      { timeout: 15_000, interval: 100 },
    );
    expect((await db.pausedIds(agentId)).size).toBe(300);
    expect((await svc.pausedInRedis(ids)).every(Boolean)).toBe(true);
  });

  it('warns at start when the role bounds statements more loosely than DATABASE_STATEMENT_TIMEOUT_MS', async () => {
    const loose = await startTestService({
      partners: [{ key, networkId, name: 'pooled' }],
      env: { DATABASE_URL: bouncer.url, DATABASE_POOLER: 'transaction', DATABASE_STATEMENT_TIMEOUT_MS: '1000' },
    });
    try {
      expect(loose.logs.records().find((line) => String(line.msg).includes('does not bound statements'))).toMatchObject({
        level: 'warn',
        statementTimeoutMs: statementTimeoutMs,
        idleInTransactionSessionTimeoutMs: statementTimeoutMs,
        databaseStatementTimeoutMs: 1_000,
      });
    } finally {
      await loose.close();
    }
  });

  it("the role's statement_timeout ends a statement that waits, and the log names its SQLSTATE", async () => {
    const agentId = await db.agent(networkId, { approved: false });
    const holder = new pg.Client({ connectionString: databaseUrl() });
    holder.on('error', () => undefined);
    await holder.connect();
    try {
      // The platform's transaction, not bounded by the service's role settings.
      await holder.query('SET idle_in_transaction_session_timeout = 0');
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM agents WHERE agent_id = $1 FOR UPDATE', [agentId]);
      const from = svc.logs.lines.length;
      const started = performance.now();
      const response = await post(agentId, true);
      const tookMs = performance.now() - started;
      expect(response.statusCode).toBe(500);
      // The server's bound (57014), before the client's (statement_timeout + 1.5 s).
      expect(tookMs).toBeLessThan(statementTimeoutMs + 1_400);
      expect(failuresSince(from).find((line) => line.msg === 'dependency failure')).toMatchObject({
        dependency: 'postgres',
        reason: 'timeout',
        sqlstate: '57014',
        sqlstateClass: 'operator_intervention',
      });
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      await holder.end();
    }
  });
});
