// A status change commits only within what fences it: an enable that gets no database connection
// in time answers 503 and never commits later; a request that outlived its Idempotency-Key's lease
// (a repeat took the key over) changes nothing; a 2026-12-01 disable answers 202 only once its flag
// is committed. Real PostgreSQL, a second session holding the agent's row, and a TCP proxy that
// cuts the service's connections. The built service, as `npm start` runs it.
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { databaseUrl } from '../support/database-url.js';
import { postStatus } from '../support/partner.js';
import { type processEnvironment, startServingProcess } from '../support/process-environment.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { waitFor } from '../support/wait.js';

const db = testDatabase();
const key = newApiKey();
const deadlineMs = 4_000;
let networkId: string;
let environment: Awaited<ReturnType<typeof processEnvironment>>;
let service: Awaited<ReturnType<typeof startServingProcess>>['service'];
let proxy: Awaited<ReturnType<typeof startTcpProxy>>;

beforeAll(async () => {
  networkId = await db.network();
  const database = new URL(databaseUrl());
  proxy = await startTcpProxy({ host: database.hostname, port: Number(database.port || 5432) });
  database.host = `127.0.0.1:${proxy.port}`;
  ({ environment, service } = await startServingProcess({ key, networkId, name: 'fenced' }, await db.agent(networkId), {
    DATABASE_URL: database.toString(),
    DATABASE_POOL_SIZE: '2',
    // Statements that wait on a row lock stay there, far past the request's deadline and lease.
    DATABASE_STATEMENT_TIMEOUT_MS: '15000',
    WORKER_LEASE_MS: '17000',
    REQUEST_DEADLINE_MS: String(deadlineMs),
    RATE_LIMIT_MAX: '0',
    WORKER_POLL_INTERVAL_MS: '200',
    WORKER_BACKOFF_MAX_MS: '500',
  }));
});

afterAll(async () => {
  await service?.stop();
  await environment?.close();
  await proxy?.close();
  await db.close();
});

/** A second session that holds the agent's row FOR UPDATE until `release`: every UPDATE of it waits. */
async function lockAgentRow(agentId: string) {
  const client = new pg.Client({ connectionString: databaseUrl() });
  await client.connect();
  await client.query('BEGIN');
  await client.query('SELECT 1 FROM agents WHERE agent_id = $1 FOR UPDATE', [agentId]);
  return {
    release: async () => {
      await client.query('ROLLBACK').catch(() => undefined);
      await client.end();
    },
  };
}

/** Waits until `count` of the service's statements wait for a row lock on the agents table. */
async function statementsWaitingForAgentRows(count: number): Promise<void> {
  await waitFor(
    async () => {
      const { rows } = await db.pool.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%UPDATE agents SET agent_approved%'`,
      );
      return rows[0].n >= count;
    },
    { timeoutMs: 10_000, intervalMs: 50, failure: `${count} statements waiting for an agent row` },
  );
}

/** A partner's status change over HTTP to the built service, read whole. */
async function setStatus(agentId: string, enabled: boolean, headers: Record<string, string> = {}) {
  const response = await postStatus(service.baseUrl, key, agentId, enabled, { headers });
  const body = await response.text();
  return { statusCode: response.status, headers: Object.fromEntries(response.headers), json: () => JSON.parse(body) };
}

type Answer = Awaited<ReturnType<typeof setStatus>>;

/** A request that may never answer on a defective build: its answer once it comes, and when. */
function tracked(request: Promise<Answer>) {
  const state: { answer?: Answer; at?: number } = {};
  void request.then((answer) => {
    state.answer = answer;
    state.at = performance.now();
  });
  return state;
}

describe('an enable behind a full connection pool', () => {
  it('answers 503 with nothing changed within its deadline, and never commits once connections free up', async () => {
    const busy = await db.agent(networkId);
    const waiting = await db.agent(networkId, { approved: false });
    const lock = await lockAgentRow(busy);
    let holders: ReturnType<typeof tracked>[] = [];
    try {
      // Both request connections wait for the locked row.
      holders = [tracked(setStatus(busy, true)), tracked(setStatus(busy, true))];
      await statementsWaitingForAgentRows(2).catch((error: Error) => {
        // What the two requests answered instead of waiting, if they did.
        throw new Error(`${error.message}; answers: ${holders.map((holder) => holder.answer?.statusCode ?? 'none').join(', ')}`);
      });
      const sentAt = performance.now();
      const enable = tracked(setStatus(waiting, true));
      await waitFor(() => enable.answer !== undefined, {
        timeoutMs: deadlineMs + 4_000,
        intervalMs: 50,
        failure: 'the enable behind a full pool did not answer by its deadline',
      });
      const answer = enable.answer!;
      expect(answer.statusCode).toBe(503);
      expect(answer.headers['retry-after']).toBe('1');
      expect(answer.json()).toMatchObject({ type: 'urn:partner-agent-status:problem:unavailable' });
      expect(enable.at! - sentAt).toBeLessThan(deadlineMs + 1_000);
    } finally {
      await lock.release();
    }
    // The connections free up: the statements that held them finish, and the refused enable stays
    // refused (on a pool without a wait limit it would run now and commit, long after its answer).
    await waitFor(() => holders.every((holder) => holder.answer !== undefined), {
      timeoutMs: 15_000,
      intervalMs: 50,
      failure: 'the enables holding the pool did not finish',
    });
    expect(holders.map((holder) => holder.answer!.statusCode)).toEqual([200, 200]);
    // A later statement of the service on the same pool has run, so nothing of the refused enable is queued.
    expect((await setStatus(busy, true)).statusCode).toBe(200);
    expect(await db.agentApproved(waiting)).toBe(false);
    expect(await db.changeCount(waiting)).toBe(0);
  });
});

describe('an Idempotency-Key whose holder waits past its lease', () => {
  it('changes nothing for the first request once a repeat took the key over; the repeat makes the one change', async () => {
    const agentId = await db.agent(networkId, { approved: false });
    const idempotencyKey = randomUUID();
    const lock = await lockAgentRow(agentId);
    let first: ReturnType<typeof tracked>;
    let repeat: ReturnType<typeof tracked>;
    try {
      first = tracked(setStatus(agentId, true, { 'idempotency-key': idempotencyKey }));
      await statementsWaitingForAgentRows(1);
      // The first request's claim runs out (its lease is the deadline plus 5 s) while its statement waits.
      await waitFor(
        async () => {
          const { rows } = await db.pool.query(
            `SELECT count(*)::int AS n FROM idempotency_keys WHERE network_id = $1 AND state = 'running' AND lease_until <= now()`,
            [networkId],
          );
          return rows[0].n === 1;
        },
        { timeoutMs: deadlineMs + 15_000, intervalMs: 100, failure: "the first request's lease did not run out" },
      );
      repeat = tracked(setStatus(agentId, true, { 'idempotency-key': idempotencyKey }));
      await statementsWaitingForAgentRows(2);
    } finally {
      await lock.release();
    }
    await waitFor(() => first.answer !== undefined && repeat.answer !== undefined, {
      timeoutMs: 15_000,
      intervalMs: 50,
      failure: 'the two requests did not answer',
    });
    expect(repeat.answer!.statusCode).toBe(200);
    expect(first.answer!.statusCode).toBe(409);
    expect(first.answer!.json()).toMatchObject({ type: 'urn:partner-agent-status:problem:idempotency-key-in-use' });
    expect(first.answer!.headers['retry-after']).toBe('1');
    // One change for one key: the repeat's.
    expect(await db.changeCount(agentId)).toBe(1);
    expect(await db.agentApproved(agentId)).toBe(true);
    const again = await setStatus(agentId, true, { 'idempotency-key': idempotencyKey });
    expect(again.statusCode).toBe(200);
    expect(again.headers['idempotent-replayed']).toBe('true');
  });
});

describe('API version 2026-12-01, the connection lost while a disable waits to set its flag', () => {
  it('never answers 202 with the flag uncommitted; the disable finishes by itself once the database is back', {
    timeout: 60_000,
  }, async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 5);
    // A platform transaction holds the agent's row: the disable is recorded, its flag waits.
    const platform = await db.holdAgentRow(agentId);
    let answer: Answer;
    try {
      const request = setStatus(agentId, false, { 'partner-api-version': '2026-12-01' });
      await waitFor(() => db.pendingRow(agentId), { timeoutMs: 10_000, intervalMs: 50, failure: 'the disable was not recorded' });
      proxy.cut();
      answer = await request;
      expect(await db.agentApproved(agentId)).toBe(true);
    } finally {
      proxy.restore();
      await platform.end();
    }
    expect(answer.statusCode).not.toBe(202);
    expect(answer.statusCode).toBe(500);
    expect(answer.json().detail).toMatch(/The disable is recorded, but the agent is not disabled in the database yet/);
    // The request's run kept its claim (its release was cut off too): the worker takes over once its lease runs out.
    await db.pendingDisableGone(agentId, 40_000, 100);
    expect(await db.agentApproved(agentId)).toBe(false);
    expect((await db.pausedIds(agentId)).size).toBe(5);
  });
});
