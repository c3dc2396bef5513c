import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** How a feed read ended (docs/interfaces.md §17). */
const feedReadOutcomes = ['ok', 'gone', 'bad_cursor'] as const;
/** Why a stream was refused or ended early. */
const feedStreamRefusals = ['limit', 'draining'] as const;
const feedStreamEnds = ['client', 'draining', 'slow_client', 'error'] as const;

/**
 * The partner events feed's series, on the app's registry. The per-partner gauge is bounded by the
 * partners of the key set (the `partner` label every partner series uses, never a network id) and
 * loses its series when a partner's last stream ends.
 */
export function feedMetrics(registry: Registry) {
  const feed = {
    reads: new Counter({
      name: 'partner_events_feed_reads_total',
      help: 'Pages of the partner events feed read, by outcome (ok, gone: a cursor past the retention, bad_cursor: a malformed cursor).',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    streamsOpen: new Gauge({
      name: 'partner_events_feed_streams_open',
      help: "Server-Sent Events streams of the partner events feed open on this replica, by partner (series dropped when a partner's last stream ends).",
      labelNames: ['partner'] as const,
      registers: [registry],
    }),
    streamsRefused: new Counter({
      name: 'partner_events_feed_streams_refused_total',
      help: 'Streams refused, by reason (limit: the network holds EVENTS_FEED_MAX_STREAMS already; draining: the replica is shutting down).',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
    streamsEnded: new Counter({
      name: 'partner_events_feed_streams_ended_total',
      help: 'Streams ended, by reason (client: it went away; draining: the replica shut down; slow_client: it fell too far behind; error).',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
    eventsStreamed: new Counter({
      name: 'partner_events_feed_events_streamed_total',
      help: 'Events written to partner event streams (backlog and live).',
      registers: [registry],
    }),
    streamLag: new Histogram({
      name: 'partner_events_feed_stream_lag_seconds',
      help: "From a live event's time (its commit) to its write on a stream.",
      buckets: [0.025, 0.05, 0.1, 0.2, 0.5, 1, 2.5, 5],
      registers: [registry],
    }),
    listening: new Gauge({
      name: 'partner_events_feed_listening',
      help: "1 while this replica's feed is woken by LISTEN on its own connection, 0 while it polls for new batches (behind a transaction pooler, or the connection lost).",
      registers: [registry],
    }),
  };
  for (const outcome of feedReadOutcomes) feed.reads.inc({ outcome }, 0);
  for (const reason of feedStreamRefusals) feed.streamsRefused.inc({ reason }, 0);
  for (const reason of feedStreamEnds) feed.streamsEnded.inc({ reason }, 0);
  feed.listening.set(0);
  return feed;
}
