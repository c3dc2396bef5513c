// The documentation of the webhook endpoint routes: schemas, examples and texts. The handlers are
// webhook-endpoints.ts.
import { Type } from '@fastify/type-provider-typebox';
import { unreachableUrl } from '../../events/address-guard.js';
import { partnerTexts, problemDetails } from '../problems.js';
import { limitResponses, rateLimitHeaders, retryAfterHeader } from './agent-status.schema.js';
import { problemResponse } from './problem-schema.js';

/** The event types an endpoint may subscribe to (docs/interfaces.md §14). */
export const webhookEventTypes = ['agent.disabled', 'agent.enabled', 'agent.disable.completed'] as const;

/** Endpoints one network may hold. */
export const maxEndpointsPerNetwork = 10;

export const webhookTexts = {
  endpointNotFound: 'No webhook endpoint with this id exists in your network.',
  deliveryNotFound: 'No delivery with this id exists for this webhook endpoint of your network.',
  tooManyEndpoints: `Your network already has ${maxEndpointsPerNetwork} webhook endpoints. Delete one before registering another.`,
  lookupsBusy:
    'Your network already has several webhook registrations waiting for their host names to resolve. Repeat the request after the number of seconds in Retry-After.',
} as const;

const exampleEndpointId = '0f8e2c7a-5d1b-4e3f-9a6c-2b7d8e9f0a1b';
const exampleDeliveryId = '6c1d9e2f-3a4b-4c5d-8e7f-9a0b1c2d3e4f';
const exampleEventId = '3b9f1e7c-2d4a-4f6b-8c1e-5a7d9b0c2e4f';
const exampleSecret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

const EventType = Type.Union(
  webhookEventTypes.map((type) => Type.Literal(type)),
  { description: 'An event type: `agent.disabled`, `agent.enabled` or `agent.disable.completed`.' },
);

const endpointFields = {
  id: Type.String({ format: 'uuid', description: 'The endpoint.' }),
  url: Type.String({ description: 'Where deliveries are sent (HTTPS).' }),
  eventTypes: Type.Array(EventType, { description: 'The event types delivered to this endpoint.' }),
  status: Type.Union([Type.Literal('enabled'), Type.Literal('disabled')], {
    description:
      'Whether deliveries are sent. The service disables an endpoint that answers 410, or that has kept failing for 5 days (only two successes in a row stop that clock); `POST /partner/webhook-endpoints/{endpointId}/enable` enables it again. Retrying a delivery does not.',
  }),
  disabledReason: Type.Optional(
    Type.Union([Type.Literal('gone'), Type.Literal('failing')], {
      description: 'Why a disabled endpoint was disabled: `gone` (it answered 410) or `failing` (5 days of failed attempts).',
    }),
  ),
  createdAt: Type.String({ format: 'date-time', description: 'When it was registered.' }),
};

const WebhookEndpointView = Type.Object(endpointFields, {
  additionalProperties: false,
  description: 'A webhook endpoint of your network (its secret is shown only when created or rotated).',
});

const secretField = Type.String({
  pattern: '^whsec_[A-Za-z0-9+/]+={0,2}$',
  description: 'The signing secret, `whsec_` and base64: shown only in this answer. Keep it like a password.',
});

const CreatedEndpoint = Type.Object({ ...endpointFields, secret: secretField }, { additionalProperties: false });

const Attempt = Type.Object(
  {
    attempt: Type.Integer({ minimum: 1, description: 'Its number, from 1.' }),
    attemptedAt: Type.String({ format: 'date-time' }),
    statusCode: Type.Union([Type.Integer(), Type.Null()], { description: 'What your endpoint answered; null when no answer came.' }),
    outcome: Type.String({
      description:
        '`success` (2xx), `http_error` (any other status, redirects included), `gone` (410), `timeout` (no 2xx within 15 s), `refused` (the address is not public), `network_error`.',
    }),
    durationMs: Type.Integer({ minimum: 0 }),
  },
  { additionalProperties: false },
);

const DeliveryView = Type.Object(
  {
    id: Type.String({ format: 'uuid', description: 'The delivery (one event to one endpoint).' }),
    eventId: Type.String({ format: 'uuid', description: 'The event: the `webhook-id` header of every attempt.' }),
    eventType: EventType,
    state: Type.Union([Type.Literal('pending'), Type.Literal('succeeded'), Type.Literal('failed')], {
      description:
        '`pending`: an attempt is due or under way; `succeeded`; `failed`: every attempt of the schedule failed, or your endpoint answered 410.',
    }),
    nextAttemptAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
      description: 'When a pending delivery is attempted next (while one is under way: when its lease ends); null otherwise.',
    }),
    createdAt: Type.String({ format: 'date-time' }),
    attempts: Type.Array(Attempt, { description: 'Every attempt made, oldest first.' }),
  },
  { additionalProperties: false },
);

const EndpointParams = Type.Object({ endpointId: Type.String({ format: 'uuid', description: 'The endpoint.' }) });

const exampleEndpoint = {
  id: exampleEndpointId,
  url: 'https://hooks.partner.example/agent-status',
  eventTypes: [...webhookEventTypes],
  status: 'enabled',
  createdAt: '2026-11-26T09:30:00.000Z',
};

const exampleDelivery = {
  id: exampleDeliveryId,
  eventId: exampleEventId,
  eventType: 'agent.disable.completed',
  state: 'succeeded',
  nextAttemptAt: null,
  createdAt: '2026-11-26T09:31:02.120Z',
  attempts: [
    { attempt: 1, attemptedAt: '2026-11-26T09:31:02.180Z', statusCode: 503, outcome: 'http_error', durationMs: 212 },
    { attempt: 2, attemptedAt: '2026-11-26T09:31:07.402Z', statusCode: 200, outcome: 'success', durationMs: 95 },
  ],
};

const withHeaders = (description: string, schema: unknown, example: unknown) => ({
  description,
  headers: { ...rateLimitHeaders },
  content: { 'application/json': { schema, examples: { example: { value: example } } } },
});

const unauthorized = problemResponse(401, 'The `x-api-key` header is missing or holds no valid key.', {
  missing: { summary: 'No x-api-key header', kind: 'unauthorized', detail: partnerTexts.missingKey },
});
const endpointNotFound = problemResponse(
  404,
  'No endpoint with this id exists in your network (byte for byte the same whether it exists in another network or nowhere).',
  { notInNetwork: { summary: 'Endpoint not in your network', kind: 'notFound', detail: webhookTexts.endpointNotFound } },
);
const malformedId = problemResponse(400, 'An id in the path is not a UUID.', {
  malformedId: { summary: 'Not a UUID', kind: 'validation', detail: 'endpointId is malformed' },
});
const databaseDown = problemResponse(500, 'The database did not answer. Repeat the request.', {
  databaseUnavailable: { summary: 'The database did not answer', kind: 'dependencyFailure', detail: problemDetails.database },
});

const common = { tags: ['Webhooks'], security: [{ apiKey: [] }] };

export const createEndpointSchema = {
  ...common,
  operationId: 'createWebhookEndpoint',
  summary: 'Register a webhook endpoint',
  description:
    'Registers an HTTPS URL to receive the events of your network, signed per Standard Webhooks 1.0 with the secret in the answer (shown only here). ' +
    'The URL must be `https` on port 443 (unless the operator allows other ports). A URL the service will not call gets one and the same 400 whatever the reason: it names an address that is not public (loopback, private, link-local, shared, reserved), literally or through DNS, or its host name does not resolve within a few seconds. ' +
    `At most ${maxEndpointsPerNetwork} endpoints a network (checked first: a network at its limit gets the 409 whatever the URL).`,
  body: Type.Object(
    {
      url: Type.String({ minLength: 1, maxLength: 2048, description: 'An `https` URL.' }),
      eventTypes: Type.Optional(
        Type.Array(EventType, { minItems: 1, uniqueItems: true, description: 'The event types to deliver; every type when omitted.' }),
      ),
    },
    { additionalProperties: false },
  ),
  response: {
    201: withHeaders('The endpoint, with its signing secret.', CreatedEndpoint, { ...exampleEndpoint, secret: exampleSecret }),
    400: problemResponse(400, 'The body is malformed, or the URL is not an HTTPS URL on an allowed port of a host the service calls.', {
      notCalled: { summary: 'URL the service will not call', kind: 'validation', detail: unreachableUrl },
      port: { summary: 'Port other than 443', kind: 'validation', detail: 'url must use port 443' },
    }),
    401: unauthorized,
    409: problemResponse(409, `Your network already has ${maxEndpointsPerNetwork} endpoints.`, {
      tooMany: { summary: 'Endpoint limit reached', kind: 'webhookEndpointLimit', detail: webhookTexts.tooManyEndpoints },
    }),
    ...limitResponses,
    429: problemResponse(
      429,
      'Over the rate limit, or too many registrations of your network are waiting for their host names to resolve. Wait for Retry-After seconds.',
      {
        rateLimited: { summary: 'Rate limit exceeded', kind: 'rateLimited', detail: problemDetails.rateLimited },
        lookupsBusy: { summary: 'Registrations waiting for name resolution', kind: 'webhookLookupsBusy', detail: webhookTexts.lookupsBusy },
      },
      { ...retryAfterHeader, ...rateLimitHeaders },
    ),
    500: databaseDown,
  },
};

export const listEndpointsSchema = {
  ...common,
  operationId: 'listWebhookEndpoints',
  summary: 'List the webhook endpoints of your network',
  description: 'Every endpoint of your network, oldest first, without secrets.',
  response: {
    200: withHeaders('The endpoints.', Type.Object({ endpoints: Type.Array(WebhookEndpointView) }, { additionalProperties: false }), {
      endpoints: [exampleEndpoint],
    }),
    401: unauthorized,
    ...limitResponses,
    500: databaseDown,
  },
};

export const deleteEndpointSchema = {
  ...common,
  operationId: 'deleteWebhookEndpoint',
  summary: 'Delete a webhook endpoint',
  description: 'Deletes the endpoint and its delivery history; nothing more is sent to it.',
  params: EndpointParams,
  response: {
    204: { type: 'null', description: 'Deleted.', headers: { ...rateLimitHeaders } },
    400: malformedId,
    401: unauthorized,
    404: endpointNotFound,
    ...limitResponses,
    500: databaseDown,
  },
};

export const rotateSecretSchema = {
  ...common,
  operationId: 'rotateWebhookSecret',
  summary: 'Rotate the signing secret of a webhook endpoint',
  description:
    'Makes a new signing secret, shown only in this answer. For 24 hours the previous secret signs beside it (two `v1` signatures in `webhook-signature`), so you can switch your verifier without missing a delivery.',
  params: EndpointParams,
  response: {
    200: withHeaders(
      'The new secret.',
      Type.Object(
        {
          secret: secretField,
          previousSecretExpiresAt: Type.String({ format: 'date-time', description: 'Until when the previous secret still signs.' }),
        },
        { additionalProperties: false },
      ),
      { secret: exampleSecret, previousSecretExpiresAt: '2026-11-27T09:30:00.000Z' },
    ),
    400: malformedId,
    401: unauthorized,
    404: endpointNotFound,
    ...limitResponses,
    500: databaseDown,
  },
};

export const enableEndpointSchema = {
  ...common,
  operationId: 'enableWebhookEndpoint',
  summary: 'Enable a webhook endpoint again',
  description:
    'Enables an endpoint the service disabled (it answered 410, or kept failing for 5 days), with a fresh failing clock; an enabled endpoint stays as it is. Its deliveries that are still pending are then attempted; failed ones are sent again only by a retry of each. Events that happened while it was disabled got no delivery to it: the events feed has them.',
  params: EndpointParams,
  response: {
    200: withHeaders('The endpoint, enabled.', WebhookEndpointView, exampleEndpoint),
    400: malformedId,
    401: unauthorized,
    404: endpointNotFound,
    ...limitResponses,
    500: databaseDown,
  },
};

export const listDeliveriesSchema = {
  ...common,
  operationId: 'listWebhookDeliveries',
  summary: 'List the recent deliveries of a webhook endpoint',
  description: 'The latest deliveries to the endpoint, newest first, each with every attempt made.',
  params: EndpointParams,
  querystring: Type.Object(
    { limit: Type.Optional(Type.String({ pattern: '^(100|[1-9][0-9]?)$', description: 'How many deliveries, 1 to 100 (default 20).' })) },
    { additionalProperties: false },
  ),
  response: {
    200: withHeaders('The deliveries.', Type.Object({ deliveries: Type.Array(DeliveryView) }, { additionalProperties: false }), {
      deliveries: [exampleDelivery],
    }),
    400: malformedId,
    401: unauthorized,
    404: endpointNotFound,
    ...limitResponses,
    500: databaseDown,
  },
};

export const retryDeliverySchema = {
  ...common,
  operationId: 'retryWebhookDelivery',
  summary: 'Send one delivery again',
  description:
    'Makes the delivery due at once, with the same `webhook-id`, on a fresh retry schedule, whatever its state. It does not enable a disabled endpoint (its deliveries wait until `POST /partner/webhook-endpoints/{endpointId}/enable`), nor stop its failing clock. A delivery whose attempt is under way is left to it.',
  params: Type.Object({
    endpointId: Type.String({ format: 'uuid', description: 'The endpoint.' }),
    deliveryId: Type.String({ format: 'uuid', description: 'The delivery.' }),
  }),
  response: {
    202: withHeaders('The delivery, due again.', DeliveryView, {
      ...exampleDelivery,
      state: 'pending',
      nextAttemptAt: '2026-11-26T10:02:00.000Z',
    }),
    400: malformedId,
    401: unauthorized,
    404: problemResponse(
      404,
      'No such endpoint in your network, or no such delivery of it (the same whether it exists elsewhere or nowhere).',
      {
        endpoint: { summary: 'Endpoint not in your network', kind: 'notFound', detail: webhookTexts.endpointNotFound },
        delivery: { summary: 'Delivery not of this endpoint', kind: 'notFound', detail: webhookTexts.deliveryNotFound },
      },
    ),
    ...limitResponses,
    500: databaseDown,
  },
};
