import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { SpendSimulator } from '../../src/spend-simulator/simulator.js';
import { idempotencyKeyDigest } from '../../src/stores/idempotency-keys.js';
import { newApiKey, testDatabase } from '../support/data.js';
import { databaseUrl } from '../support/database-url.js';
import { postStatus } from '../support/partner.js';
import { startServiceProcess } from '../support/process.js';
import { processEnvironment } from '../support/process-environment.js';
import { startTcpProxy } from '../support/tcp-proxy.js';

// docs/interfaces.md §11 at the level of whole processes: the built service (as `npm start` runs
// it) killed between recording an Idempotency-Key and answering, then asked again; a kept answer
// replayed by a process started afterwards; and a change whose database answer was lost after its
// commit, repeated after another request changed the agent.
const db = testDatabase();
const key = newApiKey();
let sim: SpendSimulator['simulator'];
let environment: Awaited<ReturnType<typeof processEnvironment>>;
let networkId: string;
let env: Record<string, string>;

type ServiceProcess = Awaited<ReturnType<typeof startServiceProcess>>;

beforeAll(async () => {
  networkId = await db.network();
  environment = await processEnvironment([{ key, networkId, name: 'conveniences-process' }], {
    OTEL_SDK_DISABLED: 'true',
    DRAIN_DELAY_MS: '0',
    RATE_LIMIT_MAX: '0',
    // A key's claim lasts the request deadline plus 5 s: 13 s here (the deadline must leave room for
    // one batch's time-outs). A disable's claim runs out in 2 s.
    REQUEST_DEADLINE_MS: '8000',
    SPEND_MANAGEMENT_TIMEOUT_MS: '5000',
    WORKER_LEASE_MS: '2000',
    WORKER_POLL_INTERVAL_MS: '200',
    DATABASE_STATEMENT_TIMEOUT_MS: '450',
  });
  sim = environment.simulator.simulator;
  env = environment.env;
});

afterAll(async () => {
  await environment?.close();
  await db.close();
});

async function changeCount(agentId: string): Promise<number> {
  const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM agent_status_changes WHERE agent_id = $1', [agentId]);
  return rows[0].n;
}

describe('Idempotency-Key across processes', () => {
  it('a SIGKILL between recording the key and answering: a repeat gets 409 while the claim lasts, then an answer, and nothing runs twice', {
    timeout: 90_000,
  }, async () => {
    let first: ServiceProcess | undefined;
    let second: ServiceProcess | undefined;
    try {
      const agentId = await db.agent(networkId);
      const ids = await db.campaigns(agentId, 5);
      const idempotencyKey = randomUUID();
      sim.setMode('hang');
      first = await startServiceProcess(env);
      const request = postStatus(first.baseUrl, key, agentId, false, { headers: { 'idempotency-key': idempotencyKey } }).catch(
        (error: Error) => error,
      );
      // The key is claimed and the disable recorded; the pause call hangs: no answer yet.
      await vi.waitFor(async () => expect(await changeCount(agentId)).toBe(1), { timeout: 10_000, interval: 20 });
      const { rows: claimed } = await db.pool.query(
        'SELECT state, change_id IS NOT NULL AS changed FROM idempotency_keys WHERE idempotency_key = $1',
        [idempotencyKeyDigest(networkId, idempotencyKey)],
      );
      expect(claimed).toEqual([{ state: 'running', changed: true }]);
      first.child.kill('SIGKILL');
      await first.exited;
      expect(await request).toBeInstanceOf(Error);

      sim.setMode('ok');
      second = await startServiceProcess(env);
      // While the dead request's claim lasts: 409 with Retry-After, never a hang.
      const early = await postStatus(second.baseUrl, key, agentId, false, { headers: { 'idempotency-key': idempotencyKey } });
      expect(early.status).toBe(409);
      expect(Number(early.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(((await early.json()) as { type: string }).type).toMatch(/idempotency-key-in-use$/);

      // Then the repeat takes the claim over and answers, without recording the disable again.
      let answer: Response | undefined;
      await vi.waitFor(
        async () => {
          answer = await postStatus(second!.baseUrl, key, agentId, false, { headers: { 'idempotency-key': idempotencyKey } });
          expect(answer.status).toBe(200);
        },
        { timeout: 30_000, interval: 500 },
      );
      expect(answer!.headers.get('idempotent-replayed')).toBeNull();
      expect(await answer!.json()).toMatchObject({ agentId, enabled: false });
      expect(await changeCount(agentId)).toBe(1);
      expect(await db.pausedIds(agentId)).toEqual(new Set(ids));

      // Kept from now on: the next repeat is a replay, also from a process started afterwards.
      const kept = await postStatus(second.baseUrl, key, agentId, false, { headers: { 'idempotency-key': idempotencyKey } });
      expect(kept.headers.get('idempotent-replayed')).toBe('true');
      const keptBody = await kept.text();
      expect(await second.stop()).toBe(0);
      second = await startServiceProcess(env);
      const afterRestart = await postStatus(second.baseUrl, key, agentId, false, { headers: { 'idempotency-key': idempotencyKey } });
      expect(afterRestart.status).toBe(200);
      expect(afterRestart.headers.get('idempotent-replayed')).toBe('true');
      expect(await afterRestart.text()).toBe(keptBody);
    } finally {
      sim.setMode('ok');
      await Promise.all([first?.stop(), second?.stop()]);
    }
  });
});

describe('Idempotency-Key of a change whose answer was lost', () => {
  it("an enable committed, its answer lost (500), another request disables: the retry with the key answers the enable's 200 and enables nothing again", {
    timeout: 60_000,
  }, async () => {
    // Every connection of the service goes through the proxy; the one that carries the enable's
    // statement forwards it (it runs and commits) and black-holes everything PostgreSQL answers.
    const target = new URL(databaseUrl());
    const proxy = await startTcpProxy(
      { host: target.hostname, port: Number(target.port || 5432) },
      { marker: 'pas_enable_agent', count: 1, answers: 'lost' },
    );
    const proxied = new URL(databaseUrl());
    proxied.hostname = '127.0.0.1';
    proxied.port = String(proxy.port);
    let service: ServiceProcess | undefined;
    try {
      service = await startServiceProcess({ ...env, DATABASE_URL: proxied.toString() });
      const agentId = await db.agent(networkId, { approved: false });
      const idempotencyKey = randomUUID();

      const lost = await postStatus(service.baseUrl, key, agentId, true, { headers: { 'idempotency-key': idempotencyKey } });
      expect(lost.status).toBe(500);
      expect(proxy.held()).toBe(1);
      // The enable committed all the same, and its key still names the change.
      expect(await db.agentApproved(agentId)).toBe(true);
      const { rows: keyRows } = await db.pool.query(
        'SELECT state, change_id IS NOT NULL AS changed, lease_until <= now() AS expired FROM idempotency_keys WHERE idempotency_key = $1',
        [idempotencyKeyDigest(networkId, idempotencyKey)],
      );
      expect(keyRows).toEqual([{ state: 'running', changed: true, expired: true }]);

      // Another operator disables the agent (no Idempotency-Key).
      const disabled = await fetch(`${service.baseUrl}/partner/agents/status`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': key },
        body: JSON.stringify({ agentId, enabled: false }),
      });
      expect(disabled.status).toBe(200);

      // The retry answers as the enable stands (its 200, computed now: not a replay of a kept
      // answer) and makes no second change.
      const retry = await postStatus(service.baseUrl, key, agentId, true, { headers: { 'idempotency-key': idempotencyKey } });
      expect(retry.status).toBe(200);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      expect(await retry.json()).toEqual({ agentId, networkId, enabled: true, pausedCampaignCount: 0 });
      expect(await db.agentApproved(agentId)).toBe(false);
      const { rows: changes } = await db.pool.query('SELECT enabled FROM agent_status_changes WHERE agent_id = $1 ORDER BY change_id', [
        agentId,
      ]);
      expect(changes).toEqual([{ enabled: true }, { enabled: false }]);

      // From then on the answer is kept and replayed.
      const replay = await postStatus(service.baseUrl, key, agentId, true, { headers: { 'idempotency-key': idempotencyKey } });
      expect(replay.status).toBe(200);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(await db.agentApproved(agentId)).toBe(false);
    } finally {
      await service?.stop();
      await proxy.close();
    }
  });
});
