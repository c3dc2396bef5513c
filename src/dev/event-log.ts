import type { PGlite } from '@electric-sql/pglite';

/**
 * `npm run dev`'s view of the events (docs/interfaces.md §14): the embedded database serves only the
 * service's connections, so its events (the view agent_events, docs/events-order.md) are printed as
 * they are committed, one line each, read through PGlite's own handle by position (one connection at
 * a time writes here: nothing commits behind a later position). Returns the function that stops it.
 */
export function printEvents(db: PGlite, write: (line: string) => void, intervalMs = 500): () => Promise<void> {
  let last = 0;
  let reading: Promise<void> | undefined;
  const read = async () => {
    const { rows } = await db.query<{ position: number; type: string; subject: string; data: Record<string, unknown> }>(
      `SELECT position::float8 AS position, 'partner-agent-status.' || type AS type, agent_id AS subject,
              json_strip_nulls(json_build_object('enabled', enabled, 'changeId', agent_seq, 'pausedCampaignCount', paused_count)) AS data
         FROM agent_events WHERE position > $1 AND xid IS NOT NULL ORDER BY position LIMIT 100`,
      [last],
    );
    for (const { position, type, subject, data } of rows) {
      last = position;
      write(`event ${type} ${subject} ${JSON.stringify(data)}\n`);
    }
  };
  const timer = setInterval(() => {
    reading ??= read()
      .catch(() => undefined)
      .finally(() => {
        reading = undefined;
      });
  }, intervalMs);
  return async () => {
    clearInterval(timer);
    await reading;
  };
}
