// The documentation of the partner events feed (docs/interfaces.md §17): schemas, examples and
// texts. The handler is partner-events.ts.
import { Type } from '@fastify/type-provider-typebox';
import { partnerTexts, problemDetails } from '../problems.js';
import { agentIdPattern, limitResponses, rateLimitHeaders } from './agent-status.schema.js';
import { problemResponse } from './problem-schema.js';
import { webhookEventTypes } from './webhook-endpoints.schema.js';

/** The project's prefix of event types in the CloudEvents (`partner-agent-status.agent.disabled`). */
export const eventTypePrefix = 'partner-agent-status.';

export const feedTexts = {
  badCursor: 'after (or Last-Event-ID) is not a cursor this service gave: send a nextCursor or an event id: exactly as received.',
  badTypes: `types must be a comma-separated list of ${webhookEventTypes.join(', ')} (the ${eventTypePrefix} prefix is optional).`,
  gone: (days: number) =>
    `The cursor is older than the ${days} days events are kept. Read from the oldest kept event (no after) and reconcile with GET /partner/agents/{agentId}/status.`,
  tooManyStreams: (max: number) =>
    `Your network already has ${max} event streams open. Close one, or read pages, and open a stream after the number of seconds in Retry-After.`,
} as const;

const exampleEvent = {
  specversion: '1.0',
  id: '9d1e7f3a-6b2c-4d8e-a1f0-3c5b7e9d2a4f',
  source: 'urn:partner-agent-status',
  type: 'partner-agent-status.agent.disabled',
  subject: 'us-east-1:7b3c2f6e-1a4d-4e8b-9c5f-2d6a8e0b1c3d',
  time: '2026-11-28T09:30:00.123456Z',
  datacontenttype: 'application/json',
  data: {
    agentId: 'us-east-1:7b3c2f6e-1a4d-4e8b-9c5f-2d6a8e0b1c3d',
    networkId: 'c8f1a2b3-4d5e-4f60-8a7b-9c0d1e2f3a4b',
    enabled: false,
    changeId: 4,
  },
};

const CloudEvent = Type.Object(
  {
    specversion: Type.Literal('1.0'),
    id: Type.String({ format: 'uuid', description: 'The event id: the same on NATS, in webhooks (`webhook-id`) and here.' }),
    source: Type.String(),
    type: Type.String({ description: 'partner-agent-status.agent.enabled, .agent.disabled or .agent.disable.completed.' }),
    subject: Type.String({ description: 'The agent.' }),
    time: Type.String({ format: 'date-time', description: 'When the change committed (within its statement).' }),
    datacontenttype: Type.Literal('application/json'),
    data: Type.Object(
      {
        agentId: Type.String(),
        networkId: Type.String({ format: 'uuid' }),
        enabled: Type.Boolean(),
        changeId: Type.Integer({ description: "The change's number among the agent's changes (a completion: its disable's)." }),
        pausedCampaignCount: Type.Optional(Type.Integer({ description: 'Completions only: campaigns the disable paused.' })),
      },
      { additionalProperties: false },
    ),
  },
  {
    additionalProperties: false,
    description: 'A CloudEvent (docs/interfaces.md §14), the same bytes as the webhook body and the NATS message.',
  },
);

const FeedPage = Type.Object(
  {
    events: Type.Array(CloudEvent, { description: "The network's events after the cursor, oldest first; an agent's in its commit order." }),
    nextCursor: Type.String({ description: 'Where the next read starts (opaque): send it as `after`. Present even when no event came.' }),
    hasMore: Type.Boolean({ description: 'Whether more events may be read at once (false: caught up as of this read; poll again later).' }),
  },
  { additionalProperties: false },
);

const databaseDown = problemResponse(500, 'The database did not answer. Repeat the request.', {
  databaseUnavailable: { summary: 'The database did not answer', kind: 'dependencyFailure', detail: problemDetails.database },
});

export const listEventsSchema = {
  tags: ['Events'],
  security: [{ apiKey: [] }],
  operationId: 'listEvents',
  summary: "Read your network's events, or stream them",
  description:
    "Your network's events (the CloudEvents of the webhooks and NATS, byte for byte), oldest first after the cursor `after`; without it, from the oldest kept (events are kept `EVENTS_FEED_RETENTION_DAYS`, 30 days by default). " +
    'A cursor read twice gives the same events. With `Accept: text/event-stream` the same route streams (Server-Sent Events): the events after `after` ' +
    '(or after `Last-Event-ID`, which wins), then new ones as they commit, each with `id:` its cursor, `event:` its type and `data:` the CloudEvent; a comment line at least every 15 s. ' +
    'Reconnecting with `Last-Event-ID` misses nothing and repeats nothing. At most 5 streams a network at once; a stream counts once against the rate limit.',
  querystring: Type.Object(
    {
      after: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'A `nextCursor`, or the `id:` of a streamed event.' })),
      limit: Type.Optional(
        Type.String({ pattern: '^(500|[1-4][0-9]{2}|[1-9][0-9]?)$', description: 'Events a page holds at most, 1 to 500 (default 100).' }),
      ),
      types: Type.Optional(
        Type.String({
          maxLength: 200,
          description: `Comma-separated event types: ${webhookEventTypes.join(', ')}, with or without the \`${eventTypePrefix}\` prefix.`,
        }),
      ),
      agentId: Type.Optional(Type.String({ pattern: agentIdPattern, description: 'Only this agent of your network.' })),
    },
    { additionalProperties: false },
  ),
  response: {
    200: {
      description: 'A page of events (application/json), or the stream (text/event-stream).',
      headers: { ...rateLimitHeaders },
      content: {
        'application/json': {
          schema: FeedPage,
          examples: { page: { value: { events: [exampleEvent], nextCursor: 'MTo0MjoxMDA3', hasMore: false } } },
        },
        'text/event-stream': {
          schema: Type.String({
            description: 'Server-Sent Events: `id:` the cursor, `event:` the type, `data:` the CloudEvent; comment lines keep it open.',
          }),
          examples: {
            stream: {
              value: `: stream open\n\nid: MTo0MjoxMDA3\nevent: partner-agent-status.agent.disabled\ndata: ${JSON.stringify(exampleEvent)}\n\n: keep-alive\n\n`,
            },
          },
        },
      },
    },
    400: problemResponse(400, 'A malformed cursor, limit, types or agentId.', {
      badCursor: { summary: 'Not a cursor of this service', kind: 'validation', detail: feedTexts.badCursor },
      badTypes: { summary: 'Unknown event type', kind: 'validation', detail: feedTexts.badTypes },
    }),
    401: problemResponse(401, 'The `x-api-key` header is missing or holds no valid key.', {
      missing: { summary: 'No x-api-key header', kind: 'unauthorized', detail: partnerTexts.missingKey },
    }),
    410: problemResponse(410, 'The cursor is older than the retention: the events after it are no longer kept.', {
      gone: { summary: 'Cursor past the retention', kind: 'eventsGone', detail: feedTexts.gone(30) },
    }),
    ...limitResponses,
    429: problemResponse(
      429,
      'Your network has used up its requests for this window, or (streams) already holds 5 streams. Wait for `Retry-After` seconds.',
      {
        rateLimited: { summary: 'Rate limit exceeded', kind: 'rateLimited', detail: problemDetails.rateLimited },
        tooManyStreams: { summary: 'Too many streams', kind: 'tooManyStreams', detail: feedTexts.tooManyStreams(5) },
      },
      limitResponses[429].headers,
    ),
    500: databaseDown,
  },
};
