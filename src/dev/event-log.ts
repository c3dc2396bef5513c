import type { PGlite } from '@electric-sql/pglite';

/**
 * `npm run dev`'s view of the events (docs/interfaces.md §14): the embedded database serves only the
 * service's connections, so the events its outbox holds are printed as they are committed, one line
 * each, read through PGlite's own handle. Returns the function that stops it.
 */
export function printEvents(db: PGlite, write: (line: string) => void, intervalMs = 500): () => Promise<void> {
  let last = 0;
  let reading: Promise<void> | undefined;
  const read = async () => {
    const { rows } = await db.query<{ position: number; event: { type: string; subject: string; data: Record<string, unknown> } }>(
      'SELECT position::float8 AS position, event FROM event_outbox WHERE position > $1 ORDER BY position LIMIT 100',
      [last],
    );
    for (const { position, event } of rows) {
      last = position;
      const { agentId: _agent, networkId: _network, ...data } = event.data;
      write(`event ${event.type} ${event.subject} ${JSON.stringify(data)}\n`);
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
