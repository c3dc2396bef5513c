import pg from 'pg';
import type { Logger } from 'pino';
import type { DatabasePooler } from '../config.js';
import type { Metrics } from '../observability/metrics.js';

/**
 * What wakes a replica's events feed when the relay records a batch (docs/interfaces.md §17): one
 * per replica, whatever the number of streams.
 * - Without a pooler, a connection of its own (a session, outside the pools) LISTENs on the channel
 *   `event_batches`, which migration 028's trigger notifies with each batch's id at its commit. A
 *   slow poll beside it covers notifications lost while the connection was re-opened.
 * - Behind a transaction pooler (DATABASE_POOLER=transaction) a session cannot be kept, so it polls
 *   the latest batch every EVENTS_FEED_POLL_INTERVAL_MS instead (one cheap statement per replica),
 *   and does the same while the listening connection is lost.
 */
export interface BatchWake {
  start(onBatch: (batchId: string) => void): void;
  stop(): Promise<void>;
}

/** How often the poll runs beside a working LISTEN. */
const safetyPollMs = 5_000;

export function createBatchWake(deps: {
  databaseUrl: string;
  pooler: DatabasePooler;
  pollIntervalMs: number;
  latest: () => Promise<string>;
  metrics: Metrics;
  log: Logger;
}): BatchWake {
  const { metrics, log } = deps;
  let onBatch: (batchId: string) => void = () => undefined;
  let stopped = false;
  let listening = false;
  let client: pg.Client | undefined;
  let pollTimer: NodeJS.Timeout | undefined;
  let reconnectTimer: NodeJS.Timeout | undefined;
  let reconnects = 0;
  let lastSeen: string | undefined;

  const announce = (batchId: string) => {
    if (lastSeen !== undefined && BigInt(batchId) <= BigInt(lastSeen)) return;
    lastSeen = batchId;
    onBatch(batchId);
  };

  const setListening = (on: boolean) => {
    listening = on;
    metrics.feed.listening.set(on ? 1 : 0);
  };

  async function poll(): Promise<void> {
    if (stopped) return;
    try {
      announce(await deps.latest());
    } catch {
      // The feed's own reads say the database is down; the next poll tries again.
    }
    if (!stopped) pollTimer = setTimeout(() => void poll(), listening ? safetyPollMs : deps.pollIntervalMs);
  }

  async function listen(): Promise<void> {
    if (stopped) return;
    const connection = new pg.Client({ connectionString: deps.databaseUrl, keepAlive: true, application_name: 'events-feed-listener' });
    client = connection;
    connection.on('notification', (message) => {
      if (message.channel === 'event_batches' && message.payload && /^\d+$/.test(message.payload)) announce(message.payload);
    });
    const lost = (error?: Error) => {
      if (client !== connection) return;
      client = undefined;
      setListening(false);
      connection.end().catch(() => undefined);
      if (stopped) return;
      reconnects += 1;
      if (reconnects === 1 || reconnects % 30 === 0) {
        log.warn({ reason: error?.message ?? 'closed', reconnects }, 'events feed: listening connection lost; polling until it is back');
      }
      reconnectTimer = setTimeout(() => void listen(), Math.min(500 * 2 ** reconnects, 10_000));
    };
    connection.on('error', lost);
    connection.on('end', () => lost());
    try {
      await connection.connect();
      await connection.query('LISTEN event_batches');
      if (client !== connection) return;
      reconnects = 0;
      setListening(true);
      // What was recorded while nobody listened.
      announce(await deps.latest());
    } catch (error) {
      lost(error as Error);
    }
  }

  return {
    start(callback) {
      onBatch = callback;
      if (deps.pooler === 'none') void listen();
      void poll();
    },
    async stop() {
      stopped = true;
      clearTimeout(pollTimer);
      clearTimeout(reconnectTimer);
      const connection = client;
      client = undefined;
      setListening(false);
      await connection?.end().catch(() => undefined);
    },
  };
}
