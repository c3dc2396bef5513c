// The partner events feed (`--only=feed`; docs/interfaces.md §17): the enable of one service without
// any stream and then beside 50 open Server-Sent Events streams (EVENTS_FEED_MAX_STREAMS raised to
// 50, all of the loaded network, so every stream gets every event of the load: the most a replica
// fans out), back to back; and each streamed event's lag from its commit (the event's `time`, the
// change row's) to its arrival at the benchmark's client (PostgreSQL and the benchmark share this
// machine's clock). The streams are read by the benchmark's process, beside autocannon.

import { openStream, readAllPages } from '../../support/event-feed-client.js';
import type { BenchContext } from '../context.js';
import { phase, startService, stop } from '../context.js';
import { percentile } from '../load.js';
import { measureEnable } from './enable.js';

export interface FeedFigures {
  streams: number;
  /** The enable beside the streams over the enable without them, same service. */
  enableRatio: number;
  eventsDelivered: number;
  lagP50Ms: number;
  lagP99Ms: number;
  lagMaxMs: number;
}

const streamCount = 50;

/** Commit time of an event in ms, with its microseconds (Date.parse keeps milliseconds). */
function committedAt(time: string): number {
  const fraction = /\.(\d+)Z$/.exec(time)?.[1] ?? '';
  return Date.parse(time) + (fraction.length > 3 ? Number(`0.${fraction.slice(3)}`) : 0);
}

export async function feedPhase(ctx: BenchContext): Promise<void> {
  await phase(ctx, 'enable beside 50 event streams', async () => {
    const service = await startService(ctx, 'feed', { EVENTS_FEED_MAX_STREAMS: String(streamCount) });
    const base = new URL(service.statusUrl).origin;
    try {
      await measureEnable(ctx, 'enable, no event stream', service.statusUrl);
      // From the latest event on: the backlog of the load before is not this figure.
      const { cursor } = await readAllPages(base, ctx.main.key, { limit: 500 });
      const streams = await Promise.all(Array.from({ length: streamCount }, () => openStream(base, ctx.main.key, { after: cursor })));
      const refused = streams.filter((s) => s.response.status !== 200).length;
      if (refused > 0) throw new Error(`${refused} of ${streamCount} streams refused`);
      await measureEnable(ctx, 'enable, 50 event streams', service.statusUrl);
      // Until every stream holds what the first holds, and that stops growing.
      let last = -1;
      for (let waited = 0; waited < 10_000; waited += 250) {
        const counts = streams.map((s) => s.messages.length);
        if (Math.min(...counts) === Math.max(...counts) && counts[0] === last) break;
        last = counts[0]!;
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
      await Promise.all(streams.map((s) => s.close()));
      const lags = streams
        .flatMap((s) => s.messages.map((m) => m.at - committedAt((JSON.parse(m.data) as { time: string }).time)))
        .sort((a, b) => a - b);
      if (lags.length === 0) throw new Error('no event reached a stream');
      const without = ctx.results.loads['enable, no event stream']!.requestsPerSecond;
      const beside = ctx.results.loads['enable, 50 event streams']!.requestsPerSecond;
      const round = (ms: number) => Math.round(ms * 10) / 10;
      const figures: FeedFigures = {
        streams: streamCount,
        enableRatio: Math.round((beside / without) * 1000) / 1000,
        eventsDelivered: lags.length,
        lagP50Ms: round(percentile(lags, 50)),
        lagP99Ms: round(percentile(lags, 99)),
        lagMaxMs: round(lags.at(-1) ?? 0),
      };
      ctx.results.feed = figures;
      console.log(
        `  feed: enable beside ${streamCount} streams at ${figures.enableRatio}x of the enable without; ${figures.eventsDelivered} events delivered, commit to client p50 ${figures.lagP50Ms} ms, p99 ${figures.lagP99Ms} ms, max ${figures.lagMaxMs} ms`,
      );
    } finally {
      await stop(ctx, service);
    }
  });
}
