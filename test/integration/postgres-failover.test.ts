// A PostgreSQL failover where the old primary stays reachable as a read-only server
// (docs/interfaces.md §13, "PostgreSQL failover"), on real servers started here: a primary of its
// own, a streaming standby made with pg_basebackup -R, and a TCP proxy in front of them standing in
// for DATABASE_URL's address, which switches to the promoted standby while the connections already
// open stay with the old primary.

import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import { newApiKey } from '../support/data.js';
import { urls } from '../support/partner.js';
import { insertAgent, insertCampaigns, insertNetwork } from '../support/platform-rows.js';
import { type PrimaryWithStandby, startPrimaryWithStandby } from '../support/postgres-standby.js';
import { startTestService, type TestService } from '../support/service.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { waitFor } from '../support/wait.js';

const key = newApiKey();
let servers: PrimaryWithStandby;
let proxy: Awaited<ReturnType<typeof startTcpProxy>>;
let svc: TestService;
let networkId: string;
const agents = { before: '', during: '', after: '' };
const campaigns: Record<keyof typeof agents, string[]> = { before: [], during: [], after: [] };

beforeAll(async () => {
  servers = await startPrimaryWithStandby();
  await migrate(servers.primary.url);
  const seed = new pg.Pool({ connectionString: servers.primary.url, max: 2 });
  try {
    networkId = await insertNetwork(seed);
    for (const which of ['before', 'during', 'after'] as const) {
      agents[which] = await insertAgent(seed, networkId);
      campaigns[which] = await insertCampaigns(seed, agents[which], 250);
    }
  } finally {
    await seed.end();
  }
  await servers.startStandby();
  proxy = await startTcpProxy({ host: '127.0.0.1', port: servers.primary.port });
  svc = await startTestService({
    partners: [{ key, networkId, name: 'failover' }],
    env: {
      DATABASE_URL: `postgres://postgres@127.0.0.1:${proxy.port}/postgres`,
      WORKER_POLL_INTERVAL_MS: '500',
      // The disable left pending across the failover is retried soon after spend management heals.
      WORKER_BACKOFF_MAX_MS: '2000',
      BREAKER_RESET_TIMEOUT_MS: '500',
    },
  });
}, 60_000);

afterAll(async () => {
  await svc?.close();
  await proxy?.close();
  await servers?.close();
});

const readiness = async () => (await svc.app.inject({ method: 'GET', url: '/readyz' })).statusCode;
const readStatus = (agentId: string) => svc.app.inject({ method: 'GET', url: urls.agentStatus(agentId), headers: { 'x-api-key': key } });

/** The service's sessions on one server (the test's own connection and the walsender left out). */
const serviceSessions = (port: number) =>
  servers.query<{ state: string; query: string }>(
    port,
    `SELECT state, left(query, 80) AS query FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`,
  );

describe('a failover to a promoted standby, the old primary left read-only and reachable', () => {
  it('turns readiness 503 while the server is read-only, 200 on the new primary, finishes the disables there and leaves the old server', async () => {
    // Before: ready, a disable done, and connections in the pools that have only read (status
    // reads, the readiness ping).
    expect(await readiness()).toBe(200);
    expect((await svc.setStatus(key, agents.before, false)).statusCode).toBe(200);
    const reads = await Promise.all(Array.from({ length: 5 }, () => readStatus(agents.after)));
    expect(reads.map((read) => read.statusCode)).toEqual([200, 200, 200, 200, 200]);
    expect((await serviceSessions(servers.primary.port)).length).toBeGreaterThan(0);
    // A disable recorded on the old primary and left pending (spend management failing): its row
    // reaches the standby by replication, and the worker has to finish it on the new primary.
    svc.sim.setMode('fail');
    const pending = await svc.setStatus(key, agents.during, false);
    expect(pending.statusCode).toBe(500);
    expect(pending.json()).toMatchObject({ pausedCampaignCount: 0, remainingCampaignCount: 250 });

    // The old primary turns read-only: readiness asks whether the server it reaches takes writes.
    await servers.demotePrimary();
    await waitFor(async () => (await readiness()) === 503, {
      timeoutMs: 5_000,
      intervalMs: 200,
      failure: 'readiness stayed 200 on a read-only server',
    });

    // The standby is promoted and the address switches to it: ready again, without a restart.
    await servers.promoteStandby();
    const switchedAt = performance.now();
    proxy.retarget(servers.standby.port);
    svc.sim.setMode('ok');
    await waitFor(async () => (await readiness()) === 200, {
      timeoutMs: 10_000,
      intervalMs: 200,
      failure: 'readiness did not come back on the new primary',
    });

    // A disable after the failover: recorded on the new primary and completed there; and the one
    // left pending before it, completed by the worker.
    const disabled = await svc.setStatus(key, agents.after, false);
    const newPrimary = await servers.client(servers.standby.port);
    try {
      const recorded = await newPrimary.query('SELECT 1 FROM agent_status_changes WHERE agent_id = $1 AND NOT enabled', [agents.after]);
      expect(recorded.rowCount, `the disable answered ${disabled.statusCode} ${disabled.body}`).toBe(1);
      await waitFor(
        async () => {
          const { rows } = await newPrimary.query(
            `SELECT (SELECT count(*) FROM campaigns WHERE agent_id = ANY($1) AND NOT paused)::int AS unpaused,
                    EXISTS (SELECT 1 FROM pending_disables WHERE agent_id = ANY($1)) AS pending`,
            [[agents.during, agents.after]],
          );
          return rows[0].unpaused === 0 && !rows[0].pending;
        },
        {
          timeoutMs: 60_000 - (performance.now() - switchedAt),
          intervalMs: 200,
          failure: 'the disables did not complete on the new primary',
        },
      );
      expect(disabled.statusCode, disabled.body).toBe(200);
      for (const ids of [campaigns.during, campaigns.after]) {
        expect(ids.every((id) => svc.sim.isPaused(id))).toBe(true);
        expect((await svc.pausedInRedis(ids)).every(Boolean)).toBe(true);
      }
    } finally {
      await newPrimary.end();
    }

    // Nothing of the service is left on the old server, the connections that only read included.
    let left: unknown[] = [];
    await waitFor(
      async () => {
        left = await serviceSessions(servers.primary.port);
        return left.length === 0;
      },
      {
        timeoutMs: 5_000,
        intervalMs: 200,
        failure: () => `the service still has sessions on the old primary: ${JSON.stringify(left)}`,
      },
    );
    expect((await serviceSessions(servers.standby.port)).length).toBeGreaterThan(0);

    // What an SRE sees: the retirements counted and logged (reason and SQLSTATE, nothing else).
    const failovers = await svc.service.metrics.registry.getSingleMetricAsString('postgres_failovers_total');
    expect(failovers).toMatch(/postgres_failovers_total\{reason="read_only"\} [1-9]/);
    const retirements = svc.logs.records().filter((line) => line.msg === 'leaving the database server: connections retired');
    expect(retirements.length).toBeGreaterThan(0);
    expect(retirements[0]).toMatchObject({ level: 'warn', dependency: 'postgres', reason: 'read_only' });
  }, 60_000);
});
