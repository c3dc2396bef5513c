import { PassThrough } from 'node:stream';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply } from 'fastify';
import type { EventFeed, StreamSink } from '../../events/event-feed.js';
import { decodeCursor, encodeCursor } from '../../events/feed-cursor.js';
import type { Metrics } from '../../observability/metrics.js';
import type { FeedFilter } from '../../stores/event-feed.js';
import { partnerRoutes } from '../paths.js';
import { problem, problemDetails, sendProblem } from '../problems.js';
import { eventTypePrefix, feedTexts, listEventsSchema } from './partner-events.schema.js';
import { webhookEventTypes } from './webhook-endpoints.schema.js';

export interface EventFeedRouteDeps {
  feed: EventFeed;
  retentionDays: number;
  maxStreamsPerNetwork: number;
  metrics: Metrics;
}

/** The types of `types=`, without the prefix; undefined when one is not an event type. */
function parseTypes(types: string): string[] | undefined {
  const parsed = new Set<string>();
  for (const raw of types.split(',')) {
    const type = raw.trim().startsWith(eventTypePrefix) ? raw.trim().slice(eventTypePrefix.length) : raw.trim();
    if (!(webhookEventTypes as readonly string[]).includes(type)) return undefined;
    parsed.add(type);
  }
  return [...parsed];
}

/** Whether the client asked for Server-Sent Events (an Accept naming text/event-stream). */
const wantsStream = (accept: string | undefined) => accept !== undefined && /(^|,)\s*text\/event-stream\s*(;|,|$)/i.test(accept);

/** The sink of a stream: a PassThrough Fastify sends as the body. */
function streamSink(
  body: PassThrough,
  raw: NodeJS.WritableStream & { writableLength: number; writableFinished: boolean; destroy(): void },
): StreamSink {
  return {
    write: (text) => !body.destroyed && body.write(text),
    buffered: () => body.writableLength + raw.writableLength,
    drained: () =>
      new Promise((resolve) => {
        if (body.destroyed || !body.writableNeedDrain) return resolve();
        const done = () => {
          body.off('drain', done);
          body.off('close', done);
          resolve();
        };
        body.once('drain', done);
        body.once('close', done);
      }),
    end: () => {
      if (!body.destroyed) body.end();
    },
    destroy: () => {
      if (!raw.writableFinished) raw.destroy();
    },
  };
}

/**
 * GET /partner/events (docs/interfaces.md §17): a page of the key's network's events after a cursor,
 * or with `Accept: text/event-stream` a stream of them. Every read carries the key's network.
 */
export const partnerEventRoutes: FastifyPluginAsyncTypebox<EventFeedRouteDeps> = async (
  app,
  { feed, retentionDays, maxStreamsPerNetwork, metrics },
) => {
  const reads = (outcome: 'ok' | 'gone' | 'bad_cursor') => metrics.feed.reads.inc({ outcome });
  /** A cursor past the retention (410), or naming no recorded batch (400, as a malformed one). */
  const refuseCursor = (kind: 'gone' | 'unknown', requestId: string, reply: FastifyReply) => {
    reads(kind === 'gone' ? 'gone' : 'bad_cursor');
    return sendProblem(
      reply,
      kind === 'gone'
        ? problem('eventsGone', feedTexts.gone(retentionDays), requestId)
        : problem('validation', feedTexts.badCursor, requestId),
    );
  };

  app.get(partnerRoutes.events, { schema: listEventsSchema }, async (request, reply) => {
    const stream = wantsStream(request.headers.accept);
    const lastEventId = request.headers['last-event-id'];
    // Last-Event-ID wins over after (a reconnecting EventSource keeps its first URL).
    const cursorText = stream && typeof lastEventId === 'string' && lastEventId !== '' ? lastEventId : request.query.after;
    const after = cursorText === undefined ? undefined : decodeCursor(cursorText);
    if (cursorText !== undefined && !after) {
      reads('bad_cursor');
      return sendProblem(reply, problem('validation', feedTexts.badCursor, request.id));
    }
    const types = request.query.types === undefined ? undefined : parseTypes(request.query.types);
    if (request.query.types !== undefined && !types) return sendProblem(reply, problem('validation', feedTexts.badTypes, request.id));
    const filter: FeedFilter = { networkIds: [request.partner!.networkId], agentId: request.query.agentId, types };

    if (!stream) {
      const result = await feed.page(after, filter, request.query.limit === undefined ? 100 : Number(request.query.limit));
      if (result.kind !== 'ok') return refuseCursor(result.kind, request.id, reply);
      reads('ok');
      request.audit.outcome = 'read';
      const { events, next, hasMore } = result.page;
      // The events' JSON as stored, spliced in: the same bytes as the webhooks' and NATS's.
      const body = `{"events":[${events.map((event) => event.event).join(',')}],"nextCursor":"${encodeCursor(next)}","hasMore":${hasMore}}`;
      return reply.type('application/json; charset=utf-8').send(body);
    }

    if (feed.draining) {
      metrics.feed.streamsRefused.inc({ reason: 'draining' });
      reply.header('retry-after', '1');
      return sendProblem(reply, problem('unavailable', problemDetails.unavailable, request.id));
    }
    const start = await feed.locate(after);
    if (start.kind !== 'ok') return refuseCursor(start.kind, request.id, reply);
    const body = new PassThrough();
    const sink = streamSink(body, reply.raw);
    const opened = await feed.stream(request.partner!.name, start.from, filter, sink);
    if (opened.kind !== 'open') {
      metrics.feed.streamsRefused.inc({ reason: opened.kind });
      reply.header('retry-after', opened.kind === 'limit' ? '5' : '1');
      return sendProblem(
        reply,
        opened.kind === 'limit'
          ? problem('tooManyStreams', feedTexts.tooManyStreams(maxStreamsPerNetwork), request.id)
          : problem('unavailable', problemDetails.unavailable, request.id),
      );
    }
    request.audit.outcome = 'stream';
    reply.raw.once('close', () => feed.clientLeft(sink));
    body.once('close', () => feed.clientLeft(sink));
    return reply
      .header('cache-control', 'no-cache, no-store')
      .header('x-accel-buffering', 'no')
      .type('text/event-stream; charset=utf-8')
      .send(body as never);
  });
};
