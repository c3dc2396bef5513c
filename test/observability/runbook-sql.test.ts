import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testDatabase } from '../support/data.js';
import { paths } from './artifacts.js';

/**
 * The SQL an SRE copies out of docs/runbook.md, run as written against the run's migrated database
 * (real PostgreSQL, the service's own migrations): each block parses, only reads, and answers what
 * its title says for rows seeded the way the service writes them.
 */
function runbookQueries(): Map<string, string> {
  const text = readFileSync(paths.runbook, 'utf8');
  const queries = new Map<string, string>();
  for (const [, sql = ''] of text.matchAll(/^```sql\n([\s\S]*?)^```$/gm)) {
    const title = /^-- (.+)$/m.exec(sql)?.[1];
    if (!title) throw new Error(`a SQL block of the runbook has no "-- title" first line:\n${sql}`);
    queries.set(title, sql);
  }
  return queries;
}

const queries = runbookQueries();
const db = testDatabase();
/** The runbook's placeholder for an agent id, replaced by a seeded one. */
const placeholder = "'us-east-1:<uuid>'";

async function readOnly(sql: string) {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN READ ONLY');
    const { rows } = await client.query(sql);
    return rows;
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
}

function query(title: string): string {
  const sql = queries.get(title);
  if (!sql) throw new Error(`the runbook has no SQL block titled "${title}"; it has: ${[...queries.keys()].join(', ')}`);
  return sql;
}

let networkId: string;
const agent = { running: '', waiting: '', expired: '', orphan: '', done: '' };
let unpausedOfRunning: string[] = [];

beforeAll(async () => {
  networkId = await db.network({ requireAgentApproval: true });
  for (const name of Object.keys(agent) as (keyof typeof agent)[]) agent[name] = await db.agent(networkId);
  unpausedOfRunning = await db.campaigns(agent.running, 3);
  await db.campaigns(agent.running, 2, { paused: true });
  await db.campaigns(agent.running, 1, { active: false });
  await db.campaigns(agent.waiting, 1);
  await db.campaigns(agent.expired, 2);
  await db.campaigns(agent.orphan, 4);
  await db.campaigns(agent.done, 5, { paused: true });
  // Every agent disabled (campaigns first: the restriction refuses them for a disabled agent).
  await db.pool.query('UPDATE agents SET agent_approved = false WHERE network_id = $1', [networkId]);
  // Pending rows as the service leaves them: claimed and leased by a replica, released after a
  // failure with a backoff, and claimed by a replica that died (lease run out).
  await db.pool.query(
    `INSERT INTO pending_disables (agent_id, requested_at, attempts, next_attempt_at, last_error, claim_token, lease_owner)
     VALUES ($1, now() - interval '2 minutes', 2, now() + interval '15 seconds', NULL, gen_random_uuid(), 'pas-6f7c9-x2k4q:1'),
            ($2, now() - interval '10 minutes', 5, now() + interval '18.5 seconds', 'spend_management:not_confirmed', NULL, NULL),
            ($3, now() - interval '6 minutes', 3, now() - interval '5 seconds', 'redis:timeout', gen_random_uuid(), 'pas-6f7c9-b8n2m:1')`,
    [agent.running, agent.waiting, agent.expired],
  );
  await db.pool.query(
    `INSERT INTO agent_status_changes (agent_id, network_id, enabled, partner_name, request_id)
     VALUES ($1, $2, true, 'acme', 'req-1'), ($1, $2, false, 'acme', 'req-2')`,
    [agent.running, networkId],
  );
});

afterAll(() => db.close());

describe('the SQL of docs/runbook.md', () => {
  it('has the queries the runbook sends SREs to, each parsing and only reading', async () => {
    expect([...queries.keys()].sort()).toEqual(
      [
        'campaigns a pending disable still has to pause',
        'disabled agents with unpaused campaigns that nothing is finishing',
        'events relay: the NATS cursor and the batches after it',
        'events relay: who holds each role',
        'pending disables: what is stuck, where, and why',
        'the status changes of one agent, newest first',
      ].sort(),
    );
    for (const [title, sql] of queries) {
      await expect(readOnly(sql), title).resolves.toBeInstanceOf(Array);
    }
  });

  it('lists what is pending, oldest first, with its network, attempts, last error, state and what is left', async () => {
    const ours = new Set([agent.running, agent.waiting, agent.expired]);
    const rows = (await readOnly(query('pending disables: what is stuck, where, and why'))).filter((r) => ours.has(r.agent_id));
    expect(rows.map((r) => r.agent_id)).toEqual([agent.waiting, agent.expired, agent.running]);
    const [waiting, expired, running] = rows;
    expect(waiting).toMatchObject({
      network_id: networkId,
      attempts: 5,
      last_error: 'spend_management:not_confirmed',
      unpaused_campaigns: '1',
    });
    expect(waiting.pending_for).toMatchObject({ minutes: 10 });
    expect(waiting.state).toMatch(/^waiting to retry in 00:00:1[78]$/);
    expect(expired).toMatchObject({ attempts: 3, last_error: 'redis:timeout', unpaused_campaigns: '2' });
    expect(expired.state).toBe('claim of pas-6f7c9-b8n2m:1 expired; the next poll of any replica takes it over');
    expect(running).toMatchObject({ attempts: 2, last_error: null, unpaused_campaigns: '3', state: 'running on pas-6f7c9-x2k4q:1' });
  });

  it("lists the campaigns one agent's disable still has to pause", async () => {
    const rows = await readOnly(query('campaigns a pending disable still has to pause').replace(placeholder, `'${agent.running}'`));
    expect(rows.map((r) => r.campaign_id)).toEqual([...unpausedOfRunning].sort());
  });

  it('finds disabled agents with unpaused campaigns and no pending row, and only those', async () => {
    const rows = await readOnly(query('disabled agents with unpaused campaigns that nothing is finishing'));
    const ours = rows.filter((r) => r.network_id === networkId);
    expect(ours).toEqual([{ agent_id: agent.orphan, network_id: networkId, unpaused_campaigns: '4' }]);
  });

  it("shows an agent's status changes newest first", async () => {
    const rows = await readOnly(query('the status changes of one agent, newest first').replace(placeholder, `'${agent.running}'`));
    expect(rows.map((r) => [r.enabled, r.partner_name, r.request_id])).toEqual([
      [false, 'acme', 'req-2'],
      [true, 'acme', 'req-1'],
    ]);
  });

  it("shows the events relay's roles and the NATS consumer's cursor, with the batches after it", async () => {
    const roles = await readOnly(query('events relay: who holds each role'));
    expect(roles.map((r) => r.role)).toEqual(['batches', 'nats']);
    const [cursor] = await readOnly(query('events relay: the NATS cursor and the batches after it'));
    expect(cursor).toMatchObject({ finished_batch: expect.any(String), batches_after: expect.any(String) });
  });

  it('never copies a placeholder that could match a real row', () => {
    for (const [title, sql] of queries) {
      for (const literal of sql.match(/'us-east-1:[^']*'/g) ?? []) expect(literal, title).toBe(placeholder);
    }
  });
});
