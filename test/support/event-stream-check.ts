import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import { unpublishedEventsSql } from './data.js';
import type { NatsServer, StreamedEvent } from './nats-server.js';

const completedType = 'partner-agent-status.agent.disable.completed';

/**
 * What the chaos suites check of the events once everything has healed (docs/interfaces.md §14):
 * waits (up to `timeoutMs`) until the agents' events are published, then compares the stream with the
 * database. Every committed change row and every completion has exactly one event id on the stream;
 * each agent's change events are in changeId order, and each completion follows the disable it
 * names. Returns the problems found (none: an empty list).
 */
export async function eventStreamProblems(
  pool: pg.Pool,
  nats: NatsServer,
  stream: string,
  agents: readonly string[],
  timeoutMs = 60_000,
): Promise<string[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await pool.query(unpublishedEventsSql, [agents]);
    if (rows[0].n === 0) break;
    if (Date.now() > deadline) return [`${rows[0].n} events still unrelayed ${timeoutMs} ms after healing`];
    await sleep(250);
  }

  const { rows: changes } = await pool.query(
    `SELECT agent_id, event_id::text AS event_id, agent_seq::int AS seq
       FROM agent_events WHERE agent_id = ANY($1) AND type <> 'agent.disable.completed' ORDER BY position`,
    [agents],
  );
  const { rows: completions } = await pool.query(
    "SELECT event_id::text AS event_id FROM agent_events WHERE agent_id = ANY($1) AND type = 'agent.disable.completed'",
    [agents],
  );
  const wanted = new Set(agents);
  const messages = (await nats.messages(stream)).filter((m) => wanted.has(m.event.data.agentId));
  const copies = new Map<string, number>();
  for (const message of messages) copies.set(message.msgId ?? '', (copies.get(message.msgId ?? '') ?? 0) + 1);

  const problems: string[] = [];
  for (const message of messages)
    if (message.msgId !== message.event.id) problems.push(`message ${message.seq}: Nats-Msg-Id is not the event id`);
  for (const { event_id: id } of [...changes, ...completions]) {
    const n = copies.get(id) ?? 0;
    if (n !== 1) problems.push(`event ${id}: ${n} copies on the stream`);
  }
  for (const agentId of agents) {
    const own: StreamedEvent[] = messages.filter((m) => m.event.data.agentId === agentId);
    const seqs = own.filter((m) => m.event.type !== completedType).map((m) => m.event.data.changeId);
    const expected = changes.filter((c) => c.agent_id === agentId).map((c) => c.seq);
    if (JSON.stringify(seqs) !== JSON.stringify(expected))
      problems.push(`${agentId}: changes ${seqs.join(',')} on the stream, ${expected.join(',')} committed`);
    own.forEach((message, at) => {
      if (message.event.type !== completedType) return;
      const before = own[at - 1]?.event;
      if (before?.type !== 'partner-agent-status.agent.disabled' || before.data.changeId !== message.event.data.changeId) {
        const around = own
          .slice(Math.max(0, at - 3), at + 2)
          .map((m) => `${m.event.type.split('.').slice(2).join('.')}:${m.event.data.changeId}`);
        problems.push(`${agentId}: completion of change ${message.event.data.changeId} not right after that disable (${around.join(' ')})`);
      }
    });
  }
  return problems;
}
