// DATABASE_MAX_CONNECTIONS (docs/interfaces.md §13, "A connection budget"): under disables, repeats,
// status reads, the worker and readiness at once, the replica's sessions on the server, counted by
// PostgreSQL itself, never exceed the budget.

import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey } from '../support/data.js';
import { databaseUrl } from '../support/database-url.js';
import { urls } from '../support/partner.js';
import { insertAgent, insertCampaigns, insertNetwork } from '../support/platform-rows.js';
import { startTestService, type TestService } from '../support/service.js';

const budget = 6;
const key = newApiKey();
const observer = new pg.Pool({ connectionString: databaseUrl(), max: 2, application_name: 'budget-observer' });
let svc: TestService;
let agents: string[] = [];

beforeAll(async () => {
  const networkId = await insertNetwork(observer);
  agents = await Promise.all(Array.from({ length: 12 }, () => insertAgent(observer, networkId)));
  for (const agentId of agents) await insertCampaigns(observer, agentId, 120);
  svc = await startTestService({
    partners: [{ key, networkId, name: 'budget' }],
    // The test service sets DATABASE_POOL_SIZE; the budget alone decides here.
    env: { DATABASE_MAX_CONNECTIONS: String(budget), DATABASE_POOL_SIZE: '', DISABLES_IN_FLIGHT_PER_NETWORK: '50', RATE_LIMIT_MAX: '0' },
  });
});

afterAll(async () => {
  await svc?.close();
  await observer.end();
});

/** The service's sessions on its database now (the observer's own left out). */
async function sessions(): Promise<number> {
  const { rows } = await observer.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity
     WHERE datname = current_database() AND backend_type = 'client backend' AND application_name <> 'budget-observer'`,
  );
  return rows[0]?.n ?? 0;
}

describe('a replica under load keeps to DATABASE_MAX_CONNECTIONS', () => {
  it('never has more sessions on the server than the budget, all pools together', async () => {
    expect(svc.config.databaseConnections).toEqual({ max: budget, request: 2, worker: 2, claimChecks: 1, readiness: 1 });
    let most = 0;
    let loading = true;
    const sampling = (async () => {
      while (loading) {
        most = Math.max(most, await sessions());
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();
    const polled = svc.service.worker.pollNow();
    const answers = await Promise.all([
      ...agents.map((agentId) => svc.setStatus(key, agentId, false)),
      ...agents.map((agentId) => svc.setStatus(key, agentId, false)),
      ...agents.map((agentId) => svc.app.inject({ method: 'GET', url: urls.agentStatus(agentId), headers: { 'x-api-key': key } })),
      ...Array.from({ length: 5 }, () => svc.app.inject({ method: 'GET', url: '/readyz' })),
    ]);
    await polled;
    loading = false;
    await sampling;
    expect(answers.filter((answer) => answer.statusCode >= 500).map((answer) => answer.body)).toEqual([]);
    expect(most).toBeGreaterThan(1);
    expect(most).toBeLessThanOrEqual(budget);
  });
});
