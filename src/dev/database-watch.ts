import pg from 'pg';

export interface DatabaseWatchOptions {
  /** The embedded database as the service reaches it: through its socket server. */
  url: string;
  /** Pause between two probes. */
  intervalMs: number;
  /** The longest one probe (connect and SELECT 1) may take before it counts as failed. */
  probeTimeoutMs: number;
  /** Probes in a row that must fail before the database counts as dead. */
  failuresInARow: number;
  /** Called once, with the last probe's error, when the database counts as dead. */
  onDead: (reason: string) => void;
}

/**
 * `npm run dev`'s watch on its embedded database: every `intervalMs` it opens a connection of its
 * own through the socket server, as the service does, runs `SELECT 1` and closes it. When
 * `failuresInARow` probes in a row fail (PGlite closed or crashed, the socket server gone or
 * refusing), `onDead` is told once, so dev can say so and stop instead of answering 500 for ever.
 * Each probe is bounded by `probeTimeoutMs`, so a database that hangs counts as failing too; one
 * probe runs at a time (a slow one delays the next instead of piling up). Returns
 * the function that stops watching (it waits for a probe under way).
 */
export function watchDatabase(options: DatabaseWatchOptions): () => Promise<void> {
  let failures = 0;
  let stopped = false;
  let probing: Promise<void> | undefined;
  const probe = async () => {
    const client = new pg.Client({
      connectionString: options.url,
      connectionTimeoutMillis: options.probeTimeoutMs,
      query_timeout: options.probeTimeoutMs,
    });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.query('SELECT 1');
      failures = 0;
    } catch (error) {
      failures += 1;
      if (failures === options.failuresInARow && !stopped) options.onDead((error as Error).message || String(error));
    } finally {
      await client.end().catch(() => undefined);
    }
  };
  const timer = setInterval(() => {
    probing ??= probe().finally(() => {
      probing = undefined;
    });
  }, options.intervalMs);
  timer.unref();
  return async () => {
    stopped = true;
    clearInterval(timer);
    await probing;
  };
}
