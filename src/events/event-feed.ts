import type { Logger } from 'pino';
import type { FeedSettings } from '../config.js';
import type { Metrics } from '../observability/metrics.js';
import type { EventFeedStore, FeedEvent, FeedFilter, FeedPosition } from '../stores/event-feed.js';
import { eventTypePrefix } from '../stores/event-outbox.js';
import type { StreamSlots } from '../stores/feed-stream-slots.js';
import type { BatchWake } from './batch-wake.js';
import { encodeCursor, isAfter } from './feed-cursor.js';

/**
 * The partner events feed (docs/interfaces.md §17): pages of a network's events after a cursor, and
 * live streams. One reader per replica: every batch the relay records wakes it once (src/events/
 * batch-wake.ts), it reads the new batches once for all the networks with an open stream, and hands
 * each stream its network's events; a stream never queries by itself once caught up.
 */

/** Events a page scan reads at most (all networks) per statement, and statements a page makes at most. */
const scanBudget = 1_000;
const scansPerPage = 4;
/** Events a stream may have waiting for its client before it is ended (it resumes with Last-Event-ID). */
const maxQueuedBytes = 4 * 1024 * 1024;
/** How long an ended stream's client has to take the rest before its connection is closed. */
const endGraceMs = 1_000;
/** The longest the feed's stop waits for its wake and a read under way. */
const stopWaitMs = 2_000;
/** The backlog of a stream is read in pages of this many events. */
const backlogPage = 500;

export interface FeedPage {
  events: FeedEvent[];
  /** Where the next read starts: after the last event, or past every batch this read looked at. */
  next: FeedPosition;
  /** Whether more may follow now (the page is full, or the read stopped before the latest batch). */
  hasMore: boolean;
}

export type PageResult = { kind: 'ok'; page: FeedPage } | { kind: 'gone' } | { kind: 'unknown' };

/** What a stream writes to its client. */
export interface StreamSink {
  /** Writes text; false when the client's buffer is full. */
  write(text: string): boolean;
  /** Bytes written and not yet taken by the client. */
  buffered(): number;
  /** Resolves when the buffer has room again (or the client left). */
  drained(): Promise<void>;
  /** Ends the response. */
  end(): void;
  /** Closes the connection if the response has not finished (a client that stopped reading). */
  destroy(): void;
}

interface Subscriber {
  networkId: string;
  filter: FeedFilter;
  cursor: FeedPosition;
  /** Caught up: live events are written at once; before that they wait in `waiting`. */
  live: boolean;
  waiting: FeedEvent[];
  /** Messages made for the stream and not written yet: written together, one write a batch. */
  outgoing: string[];
  sink: StreamSink;
  end(reason: 'client' | 'draining' | 'slow_client' | 'error'): void;
}

export interface EventFeedDeps {
  store: EventFeedStore;
  wake: BatchWake;
  slots: StreamSlots;
  settings: FeedSettings;
  source: string;
  metrics: Metrics;
  log: Logger;
}

const passes = (filter: FeedFilter, event: FeedEvent) =>
  filter.networkIds.includes(event.networkId) &&
  (filter.agentId === undefined || event.agentId === filter.agentId) &&
  (filter.types === undefined || filter.types.includes(event.type));

/**
 * One SSE message: `id:` the event's cursor, `event:` its type (as the CloudEvent says it), `data:`
 * the CloudEvent. Made once per event, whatever the number of streams it goes to.
 */
function frameOf(event: FeedEvent & { frame?: string }): string {
  event.frame ??= `id: ${encodeCursor(event)}\nevent: ${eventTypePrefix}${event.type}\ndata: ${event.event}\n\n`;
  return event.frame;
}

export class EventFeed {
  private readonly subscribers = new Set<Subscriber>();
  /** The last batch handed to the streams (every batch up to it was read, or was read by every stream's backlog). */
  private seen: string | undefined;
  private pumping: Promise<void> | undefined;
  private again = false;
  private closing = false;
  private failures = 0;

  constructor(private readonly deps: EventFeedDeps) {}

  start(): void {
    this.deps.wake.start((batchId) => this.wakeUp(batchId));
    // Where the replica starts: the latest batch (streams opened later read from there on).
    this.wakeUp(undefined);
  }

  /** Whether new streams are refused (the replica is shutting down). */
  get draining(): boolean {
    return this.closing;
  }

  /** Ends every stream (the replica is shutting down) and refuses new ones; the wake stops. */
  async stop(): Promise<void> {
    this.closing = true;
    for (const subscriber of [...this.subscribers]) subscriber.end('draining');
    // Bounded: a read under way or a listening connection that does not answer its end never holds
    // the shutdown (the pools close after this, which ends what is left).
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, stopWaitMs);
    });
    await Promise.race([Promise.all([this.deps.wake.stop(), this.pumping]), late]);
    clearTimeout(timer);
  }

  /** A page of a network's events after `after` (undefined: from the oldest kept). */
  async page(after: FeedPosition | undefined, filter: FeedFilter, limit: number): Promise<PageResult> {
    const { store, settings, source } = this.deps;
    const start = await store.start(after, settings.retentionMs);
    if (start.kind !== 'ok') return start;
    const events: FeedEvent[] = [];
    let next = start.from;
    for (let scans = 0; scans < scansPerPage; scans += 1) {
      if (BigInt(next.batch) >= BigInt(start.latest) && next.position === null)
        return { kind: 'ok', page: { events, next, hasMore: false } };
      const scan = await store.scan(next, start.latest, filter, limit - events.length, scanBudget, source);
      events.push(...scan.events);
      const last = scan.events.at(-1);
      if (events.length >= limit && last) return { kind: 'ok', page: { events, next: last, hasMore: true } };
      next = scan.scannedTo === undefined ? { batch: start.latest, position: null } : { batch: scan.scannedTo, position: null };
    }
    return { kind: 'ok', page: { events, next, hasMore: BigInt(next.batch) < BigInt(start.latest) } };
  }

  /**
   * Opens a stream of the network's events after `from` (checked with `page` before): takes one of
   * the network's stream slots (false: none left), writes the backlog, then live events until the
   * client leaves or the replica shuts down (`ended` resolves then).
   */
  async stream(
    partner: string,
    from: FeedPosition,
    filter: FeedFilter,
    sink: StreamSink,
  ): Promise<{ kind: 'open'; ended: Promise<void> } | { kind: 'limit' } | { kind: 'draining' }> {
    const { slots, metrics, settings } = this.deps;
    if (this.closing) return { kind: 'draining' };
    const networkId = filter.networkIds[0]!;
    const slot = await slots.take(networkId, settings.maxStreamsPerNetwork);
    if (!slot) return { kind: 'limit' };
    if (this.closing) {
      await slot.release();
      return { kind: 'draining' };
    }
    let resolveEnded!: () => void;
    const ended = new Promise<void>((resolve) => {
      resolveEnded = resolve;
    });
    let heartbeat: NodeJS.Timeout | undefined;
    const subscriber: Subscriber = {
      networkId,
      filter,
      cursor: from,
      live: false,
      waiting: [],
      outgoing: [],
      sink,
      end: (reason) => {
        if (!this.subscribers.delete(subscriber)) return;
        clearInterval(heartbeat);
        metrics.feed.streamsEnded.inc({ reason });
        const open = metrics.feed.streamsOpen.labels({ partner });
        open.dec();
        if (![...this.subscribers].some((other) => other.networkId === networkId)) metrics.feed.streamsOpen.remove({ partner });
        void slot.release();
        sink.end();
        // A client that does not read what is left (slow, or gone without a word) would hold its
        // connection, and a shutdown waiting for it: closed after a grace.
        if (reason !== 'client') setTimeout(() => sink.destroy(), endGraceMs).unref();
        resolveEnded();
      },
    };
    // Registered before the backlog is read: a batch the reader reads from now on reaches this
    // stream (kept in `waiting` until the backlog is written), and every earlier one was recorded
    // before the backlog's reads start, so they see it (docs/events-order.md).
    this.subscribers.add(subscriber);
    metrics.feed.streamsOpen.inc({ partner });
    heartbeat = setInterval(() => {
      sink.write(': keep-alive\n\n');
      void slot.renew();
    }, settings.heartbeatMs);
    heartbeat.unref();
    // A comment at once: proxies and clients see the stream open before any event.
    sink.write(': stream open\n\n');
    this.catchUp(subscriber).catch((error: unknown) => {
      this.deps.log.warn({ reason: (error as Error).message }, 'events stream: backlog read failed; ending the stream');
      subscriber.end('error');
    });
    return { kind: 'open', ended };
  }

  /** Where a read after `after` starts (undefined: the oldest kept), or why it cannot. */
  locate(after: FeedPosition | undefined) {
    return this.deps.store.start(after, this.deps.settings.retentionMs);
  }

  /** Ends the stream whose client left. */
  clientLeft(sink: StreamSink): void {
    for (const subscriber of this.subscribers) if (subscriber.sink === sink) subscriber.end('client');
  }

  private async catchUp(subscriber: Subscriber): Promise<void> {
    for (;;) {
      const result = await this.page(subscriber.cursor, subscriber.filter, backlogPage);
      if (!this.subscribers.has(subscriber)) return;
      if (result.kind !== 'ok') throw new Error(`backlog ${result.kind}`);
      for (const event of result.page.events) subscriber.outgoing.push(frameOf(event));
      const room = this.flush(subscriber);
      subscriber.cursor = result.page.next;
      // The next page once the client took this one ('drain' comes only after a write said full).
      if (!room) await subscriber.sink.drained();
      if (!result.page.hasMore) break;
    }
    const waiting = subscriber.waiting;
    subscriber.waiting = [];
    subscriber.live = true;
    for (const event of waiting) this.deliver(subscriber, event);
    this.flush(subscriber);
  }

  /** Queues a live event for the stream (written by `flush`), unless it has it or it does not pass its filter. */
  private deliver(subscriber: Subscriber, event: FeedEvent): void {
    if (!subscriber.live) {
      subscriber.waiting.push(event);
      return;
    }
    if (!isAfter(event, subscriber.cursor) || !passes(subscriber.filter, event)) return;
    subscriber.outgoing.push(frameOf(event));
    subscriber.cursor = event;
    this.deps.metrics.feed.streamLag.observe(event.ageSeconds);
  }

  /** Writes what the stream has waiting in one write; ends a stream whose client fell too far behind. Whether the sink has room. */
  private flush(subscriber: Subscriber): boolean {
    if (subscriber.outgoing.length === 0 || !this.subscribers.has(subscriber)) return true;
    const room = subscriber.sink.write(subscriber.outgoing.join(''));
    this.deps.metrics.feed.eventsStreamed.inc(subscriber.outgoing.length);
    subscriber.outgoing = [];
    if (subscriber.sink.buffered() > maxQueuedBytes) subscriber.end('slow_client');
    return room;
  }

  /** A batch was recorded (its id when known): read what is new for the open streams, once. */
  private wakeUp(batchId: string | undefined): void {
    if (batchId !== undefined && this.subscribers.size === 0 && !this.pumping) {
      // Nobody listens: nothing to read; a stream opened later reads this batch in its backlog.
      if (this.seen === undefined || BigInt(batchId) > BigInt(this.seen)) this.seen = batchId;
      return;
    }
    if (this.pumping) {
      this.again = true;
      return;
    }
    this.pumping = this.pump(batchId).finally(() => {
      this.pumping = undefined;
      if (this.again && !this.closing) {
        this.again = false;
        this.wakeUp(undefined);
      }
    });
  }

  private async pump(hint: string | undefined): Promise<void> {
    const { store, source, log } = this.deps;
    try {
      // The target first, the streams after: a stream registered after this point was registered
      // after the target was recorded, so its backlog reads it.
      const target = hint ?? (await store.latest());
      while (!this.closing && (this.seen === undefined || BigInt(this.seen) < BigInt(target))) {
        const streams = [...this.subscribers];
        if (streams.length === 0) {
          this.seen = target;
          break;
        }
        // Never woken before: from the earliest place a stream is at (each skips what it has).
        const from = this.seen ?? streams.map(readFrom).reduce((a, b) => (BigInt(a) < BigInt(b) ? a : b));
        const networkIds = [...new Set(streams.map((stream) => stream.networkId))];
        const scan = await store.scan({ batch: from, position: null }, target, { networkIds }, 1_000_000, scanBudget, source);
        for (const event of scan.events) {
          for (const stream of streams)
            if (stream.networkId === event.networkId && this.subscribers.has(stream)) this.deliver(stream, event);
        }
        for (const stream of streams) this.flush(stream);
        this.seen = scan.scannedTo ?? target;
      }
      this.failures = 0;
    } catch (error) {
      this.failures += 1;
      if (this.failures === 1 || this.failures % 50 === 0) {
        log.warn({ reason: (error as Error).message, failures: this.failures }, 'events feed: reading new batches failed; retrying');
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(100 * 2 ** this.failures, 5_000)));
      this.again = true;
    }
  }
}

/** The last batch a stream has read whole. */
const readFrom = (stream: Subscriber) =>
  stream.cursor.position === null ? stream.cursor.batch : (BigInt(stream.cursor.batch) - 1n).toString();
