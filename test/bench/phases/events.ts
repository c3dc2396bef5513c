// Events (`--only=events`; docs/interfaces.md §14): the enable of a service whose relay publishes
// every change to NATS JetStream (a nats-server of the run's own, file storage), beside the enable
// floor; and from the stream, what the relay sustained beside that load: events a second, and each
// event's lag from its commit (the change row's time) to the stream's acknowledgement (the time the
// server stored it; PostgreSQL and nats-server share this machine's clock).

import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { jetstream } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { startNatsServer } from '../../support/nats-server.js';
import type { BenchContext } from '../context.js';
import { phase, startService, stop } from '../context.js';
import { percentile } from '../load.js';
import { measureEnable } from './enable.js';
import { floor } from './floors.js';

export interface EventFigures {
  events: number;
  /** Events the stream acknowledged a second, from the first to the last acknowledgement. */
  relayedPerSecond: number;
  lagP50Ms: number;
  lagP99Ms: number;
  lagMaxMs: number;
  /** From the end of the load until every event committed was published (the NATS consumer's cursor past it). */
  drainMs: number;
}

const stream = 'PARTNER_AGENT_STATUS';
/** Events committed and in no batch yet. */
const unbatched = `
  SELECT count(*)::int AS n FROM agent_events e, (SELECT snapshot FROM event_batches ORDER BY id DESC LIMIT 1) l
  WHERE e.xid >= pg_snapshot_xmax(l.snapshot) OR e.xid = ANY (ARRAY(SELECT pg_snapshot_xip(l.snapshot)))`;
/** Events committed and not yet in a batch the NATS consumer finished (docs/events-order.md). */
const unpublished = `
  SELECT count(*)::int AS n
  FROM agent_events e, event_consumers c JOIN event_batches b ON b.id = c.batch_id
  WHERE c.name = 'nats' AND (e.xid >= pg_snapshot_xmax(b.snapshot) OR e.xid = ANY (ARRAY(SELECT pg_snapshot_xip(b.snapshot))))`;
const enableFloor = 'floor: enable (rate-limit EVALSHA + durable write) via node-postgres';

/** CPU seconds (user + system) a process has used, from /proc/<pid>/stat (clock ticks of 1/100 s). */
function cpuSecondsOf(pid: number | undefined): number {
  if (!pid) return 0;
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** Every message of the stream: the acknowledgement time (ms) and the event's commit time (ms). */
async function readStream(url: string): Promise<Array<{ ackedAt: number; committedAt: number }>> {
  const nc = await connect({ servers: url });
  try {
    const consumer = await jetstream(nc).consumers.get(stream);
    const found: Array<{ ackedAt: number; committedAt: number }> = [];
    for (;;) {
      const batch = await consumer.fetch({ max_messages: 1_000, expires: 1_000 });
      let n = 0;
      let pending = 0;
      for await (const message of batch) {
        n += 1;
        pending = message.info.pending;
        const event = message.json<{ time: string }>();
        found.push({ ackedAt: message.info.timestampNanos / 1e6, committedAt: Date.parse(event.time) + microsOf(event.time) });
      }
      if (n === 0 || pending === 0) return found;
    }
  } finally {
    await nc.close();
  }
}

/** The sub-millisecond part of an RFC 3339 time with microseconds (Date.parse keeps milliseconds). */
function microsOf(time: string): number {
  const fraction = /\.(\d+)Z$/.exec(time)?.[1] ?? '';
  return fraction.length > 3 ? Number(`0.${fraction.slice(3)}`) : 0;
}

export async function eventsPhase(ctx: BenchContext): Promise<void> {
  const nats = await startNatsServer();
  try {
    await phase(ctx, 'enable, events to NATS', async () => {
      if (!ctx.results.loads[enableFloor]) await floor(ctx, 'enable', enableFloor);
      const service = await startService(ctx, 'events', {
        EVENTS_NATS_URL: nats.url,
        EVENTS_CREATE_STREAM: 'true',
        EVENTS_SOURCE: 'https://bench.invalid/',
      });
      try {
        // Only this load's events: the NATS consumer starts at the latest batch, once the service
        // took every earlier change (the floor's, the earlier phases') into a batch.
        for (const startedWaiting = performance.now(); ; await sleep(20)) {
          const { rows } = await ctx.db.query(unbatched);
          if (rows[0].n === 0) break;
          if (performance.now() - startedWaiting > 60_000) throw new Error(`${rows[0].n} earlier events still in no batch after a minute`);
        }
        await ctx.db.query(
          "UPDATE event_consumers SET batch_id = (SELECT max(id) FROM event_batches), position = NULL WHERE name = 'nats'",
        );
        const cpuBefore = { service: cpuSecondsOf(service.child.pid), nats: cpuSecondsOf(nats.pid) };
        const startedAt = performance.now();
        // Events committed before the load that the relay had in hand when the cursor moved (a page
        // read before it saw the move) reach the stream too: only the load's own are counted.
        const loadBeganAt = Date.now();
        await measureEnable(ctx, 'enable, events to NATS', service.statusUrl);
        const endedAt = performance.now();
        const loadSeconds = (endedAt - startedAt) / 1_000;
        const cpuShare = (used: number) => Math.round((used / loadSeconds) * 100);
        console.log(
          `  events: CPU during the load (warm-up included): service ${cpuShare(cpuSecondsOf(service.child.pid) - cpuBefore.service)} %, nats-server ${cpuShare(cpuSecondsOf(nats.pid) - cpuBefore.nats)} % of a core`,
        );
        for (;;) {
          const { rows } = await ctx.db.query(unpublished);
          if (rows[0].n === 0) break;
          if (performance.now() - endedAt > 60_000) throw new Error(`${rows[0].n} events still unpublished a minute after the load`);
          await sleep(20);
        }
        const drainMs = Math.round(performance.now() - endedAt);
        const exposition = await (await fetch(service.metricsUrl)).text();
        const failures = exposition
          .split('\n')
          .filter((line) => line.startsWith('events_publish_failures_total{') && !line.endsWith(' 0'))
          .join(', ');
        if (failures) console.log(`  events: publishes that failed: ${failures}`);
        // BENCH_EVENTS_DEBUG=1: the service's PostgreSQL calls (time and count by operation) and its publishes.
        if (process.env.BENCH_EVENTS_DEBUG) {
          const figures =
            /^(dependency_request_duration_seconds_(sum|count)\{dependency="postgres"|events_publish_duration_seconds_(sum|count)|events_batched)/;
          for (const line of exposition.split('\n').filter((l) => figures.test(l))) console.log(`    ${line}`);
        }
        const messages = (await readStream(nats.url)).filter((m) => m.committedAt >= loadBeganAt);
        if (messages.length === 0) throw new Error('no event reached the stream');
        const lags = messages.map((m) => m.ackedAt - m.committedAt).sort((a, b) => a - b);
        const acked = messages.map((m) => m.ackedAt);
        const spanSeconds = (Math.max(...acked) - Math.min(...acked)) / 1_000;
        const round = (ms: number) => Math.round(ms * 10) / 10;
        const figures: EventFigures = {
          events: messages.length,
          relayedPerSecond: Math.round(messages.length / Math.max(spanSeconds, 0.001)),
          lagP50Ms: round(percentile(lags, 50)),
          lagP99Ms: round(percentile(lags, 99)),
          lagMaxMs: round(lags.at(-1) ?? 0),
          drainMs,
        };
        ctx.results.events = figures;
        console.log(
          `  events: ${figures.events} published, ${figures.relayedPerSecond}/s, commit to acknowledgement p50 ${figures.lagP50Ms} ms, p99 ${figures.lagP99Ms} ms, max ${figures.lagMaxMs} ms; all published ${drainMs} ms after the load`,
        );
      } finally {
        await stop(ctx, service);
      }
    });
  } finally {
    await nats.close();
  }
}
