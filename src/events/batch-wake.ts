import pg from 'pg';
import type { Logger } from 'pino';
import type { Metrics } from '../observability/metrics.js';

/**
 * What wakes a replica's events feed when the relay records a batch (docs/interfaces.md §17): one
 * per replica, whatever the number of streams.
 * - Without a pooler, a connection of its own (a session, taken from the request pool's share of the budget) LISTENs on the channel
 *   `event_batches`, which migration 028's trigger notifies with each batch's id at its commit. A
 *   slow poll beside it covers notifications lost while the connection was re-opened.
 * - Behind a transaction pooler (DATABASE_POOLER=transaction) a session cannot be kept, so it polls
 *   the latest batch every EVENTS_FEED_POLL_INTERVAL_MS instead (one cheap statement per replica),
 *   and does the same while the listening connection is lost, and where the replica's connection
 *   budget leaves no connection for it (src/service.ts, feedListens).
 * - When the pools leave a server that failed over, the listening session leaves it too
 *   (`reconnect`) and listens again wherever DATABASE_URL now leads.
 */
export interface BatchWake {
  start(onBatch: (batchId: string) => void): void;
  /** Ends the listening session (if any) and listens again on a new one. */
  reconnect(): void;
  stop(): Promise<void>;
}

/** How often the poll runs beside a working LISTEN. */
const safetyPollMs = 5_000;

interface BatchWakeDeps {
  databaseUrl: string;
  /** Whether to keep a LISTEN session; else it only polls. */
  listen: boolean;
  pollIntervalMs: number;
  latest: () => Promise<string>;
  metrics: Metrics;
  log: Logger;
}

/** The listening connection (or the poll) of one replica, and the last batch it announced. */
class ReplicaBatchWake implements BatchWake {
  private onBatch: (batchId: string) => void = () => undefined;
  private stopped = false;
  private listening = false;
  private client: pg.Client | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private reconnects = 0;
  private lastSeen: string | undefined;

  constructor(private readonly deps: BatchWakeDeps) {}

  private announce(batchId: string): void {
    if (this.lastSeen !== undefined && BigInt(batchId) <= BigInt(this.lastSeen)) return;
    this.lastSeen = batchId;
    this.onBatch(batchId);
  }

  private setListening(on: boolean): void {
    this.listening = on;
    this.deps.metrics.feed.listening.set(on ? 1 : 0);
  }

  private async poll(): Promise<void> {
    if (this.stopped) return;
    try {
      this.announce(await this.deps.latest());
    } catch {
      // The feed's own reads say the database is down; the next poll tries again.
    }
    if (!this.stopped) this.pollTimer = setTimeout(() => void this.poll(), this.listening ? safetyPollMs : this.deps.pollIntervalMs);
  }

  /** The connection ended or failed: polling until another one listens. */
  private lost(connection: pg.Client, error?: Error): void {
    if (this.client !== connection) return;
    this.client = undefined;
    this.setListening(false);
    connection.end().catch(() => undefined);
    if (this.stopped) return;
    this.reconnects += 1;
    if (this.reconnects === 1 || this.reconnects % 30 === 0) {
      this.deps.log.warn(
        { reason: error?.message ?? 'closed', reconnects: this.reconnects },
        'events feed: listening connection lost; polling until it is back',
      );
    }
    this.reconnectTimer = setTimeout(() => void this.listen(), Math.min(500 * 2 ** this.reconnects, 10_000));
  }

  private async listen(): Promise<void> {
    if (this.stopped) return;
    const connection = new pg.Client({
      connectionString: this.deps.databaseUrl,
      keepAlive: true,
      application_name: 'events-feed-listener',
    });
    this.client = connection;
    connection.on('notification', (message) => {
      if (message.channel === 'event_batches' && message.payload && /^\d+$/.test(message.payload)) this.announce(message.payload);
    });
    connection.on('error', (error) => this.lost(connection, error));
    connection.on('end', () => this.lost(connection));
    try {
      await connection.connect();
      await connection.query('LISTEN event_batches');
      if (this.client !== connection) return;
      this.reconnects = 0;
      this.setListening(true);
      // What was recorded while nobody listened.
      this.announce(await this.deps.latest());
    } catch (error) {
      this.lost(connection, error as Error);
    }
  }

  start(callback: (batchId: string) => void): void {
    this.onBatch = callback;
    if (this.deps.listen) void this.listen();
    void this.poll();
  }

  reconnect(): void {
    const connection = this.client;
    if (connection) this.lost(connection, new Error('the database server was left (failover)'));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.pollTimer);
    clearTimeout(this.reconnectTimer);
    const connection = this.client;
    this.client = undefined;
    this.setListening(false);
    await connection?.end().catch(() => undefined);
  }
}

export function createBatchWake(deps: BatchWakeDeps): BatchWake {
  return new ReplicaBatchWake(deps);
}
