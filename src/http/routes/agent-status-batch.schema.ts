// The documentation of the bulk status change (docs/interfaces.md §16): POST /partner/agents/status/batch
// and GET /partner/agents/status/batch/{batchId}. The handlers are agent-status-batch.ts.
import { Type } from '@fastify/type-provider-typebox';
import { documentedPath, partnerRoutes } from '../paths.js';
import { batchBodyLimitBytes, batchTexts, convenienceTexts, maxBatchChanges, partnerTexts, problemDetails } from '../problems.js';
import {
  agentIdPattern,
  exampleAgentId,
  exampleNetworkId,
  limitResponses,
  rateLimitHeaders,
  replayedHeader,
  retryAfterHeader,
} from './agent-status.schema.js';
import { problemResponse } from './problem-schema.js';

const secondAgentId = 'us-east-1:9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d';
const exampleBatchId = '2c7d9e1f-4a6b-4c8d-9e0f-1a2b3c4d5e6f';

const BatchRequest = Type.Object(
  {
    changes: Type.Array(
      Type.Object(
        {
          agentId: Type.String({
            pattern: agentIdPattern,
            description: 'An agent of your network, `us-east-1:<uuid>`; at most once per batch.',
          }),
          enabled: Type.Boolean({ description: '`false` disables the agent and pauses its campaigns; `true` enables it.' }),
        },
        { additionalProperties: false },
      ),
      { minItems: 1, maxItems: maxBatchChanges, description: `1 to ${maxBatchChanges} changes, each agent at most once.` },
    ),
  },
  { additionalProperties: false },
);

const BatchResult = Type.Object(
  {
    agentId: Type.String({ pattern: agentIdPattern, description: 'The change’s agent, as sent.' }),
    status: Type.Integer({
      description: `What \`POST ${documentedPath(partnerRoutes.agentStatus)}\` would have answered for this change alone: 200, 202, 404, 409 or 500.`,
    }),
    body: Type.Object(
      {},
      {
        additionalProperties: true,
        description:
          'The body that single call would have answered: the status change (200), the agent’s status (202, a disable still pausing), or the problem object (404, 409, 500).',
      },
    ),
  },
  { additionalProperties: false },
);

const BatchResults = Type.Object(
  {
    batchId: Type.String({
      format: 'uuid',
      description: `The batch, readable for 24 hours at \`GET ${documentedPath(partnerRoutes.agentStatusBatchRead)}\`.`,
    }),
    results: Type.Array(BatchResult, { description: 'One result per change, in request order.' }),
  },
  { additionalProperties: false },
);

const resultsExample = {
  batchId: exampleBatchId,
  results: [
    {
      agentId: exampleAgentId,
      status: 200,
      body: { agentId: exampleAgentId, networkId: exampleNetworkId, enabled: false, pausedCampaignCount: 10 },
    },
    {
      agentId: secondAgentId,
      status: 404,
      body: {
        type: 'urn:partner-agent-status:problem:not-found',
        title: 'Not found',
        status: 404,
        detail: partnerTexts.notInNetwork,
        requestId: '5b0e8c1d-2f47-4a36-9e1b-7d3c6a9f0e42',
      },
    },
  ],
};

const description = [
  'Makes up to 1,000 status changes of agents of your network in one call. Each change is made exactly as `POST ' +
    documentedPath(partnerRoutes.agentStatus) +
    '` would make it (its own status-change record carrying this request’s `x-request-id`, its own events and webhooks, and for a disable its own pending disable and counts), and is answered with that call’s status and body under the same `Partner-Api-Version`. Changes are independent: one that fails neither undoes nor holds back another.',
  '',
  'Disables of one batch share spend-management calls (up to 100 campaigns of any of its agents a call), so a large batch is much faster than the same changes one by one.',
  '',
  'The batch as a whole answers 400 (malformed, empty, over 1,000 changes or an agent repeated: `errors[0].pointer` names the first bad change), 401, 413, 415, 429 (each change counts as one request of your rate limit and each disable towards the disables at once; a batch the remaining allowance cannot hold is refused whole, using none of it) or 503; then nothing was changed.',
  '',
  '`Idempotency-Key` covers the whole batch: a repeat answers the batch’s results as they then stand. `Prefer: respond-async` answers 202 once every change is recorded, with `Location` of the batch.',
].join('\n');

/** The POST's schema and OpenAPI settings. */
export function setBatchDocumentation() {
  return {
    schema: {
      operationId: 'setAgentStatusBatch',
      summary: 'Enable or disable up to 1,000 agents of your network in one call',
      description,
      tags: ['Agents'],
      security: [{ apiKey: [] }],
      headers: Type.Object({
        'idempotency-key': Type.Optional(
          Type.String({ description: 'Makes the whole batch safe to repeat for 24 hours (1 to 255 printable ASCII characters).' }),
        ),
        prefer: Type.Optional(
          Type.String({ description: '`respond-async`: 202 once every change is recorded.', examples: ['respond-async'] }),
        ),
      }),
      body: BatchRequest,
      response: {
        200: {
          description: 'Every change was made or answered; one result per change, in request order.',
          headers: { ...rateLimitHeaders, ...replayedHeader, location: { type: 'string', description: 'The batch’s resource.' } },
          content: {
            'application/json': {
              schema: BatchResults,
              examples: { mixed: { summary: 'A disable and an unknown agent', value: resultsExample } },
            },
          },
        },
        202: {
          description: 'Prefer: respond-async: every change is recorded; `Location` answers the results as they stand.',
          headers: {
            location: { type: 'string', description: 'The batch’s resource.' },
            'preference-applied': { type: 'string', enum: ['respond-async'] },
          },
          content: {
            'application/json': {
              schema: Type.Object(
                { batchId: Type.String({ format: 'uuid' }), changeCount: Type.Integer({ minimum: 1, maximum: maxBatchChanges }) },
                { additionalProperties: false },
              ),
              examples: { accepted: { summary: 'Recorded, pausing goes on', value: { batchId: exampleBatchId, changeCount: 2 } } },
            },
          },
        },
        400: problemResponse(400, 'The batch is malformed; `errors[0].pointer` names the first bad change. Nothing was changed.', {
          repeated: {
            summary: 'An agent repeated',
            kind: 'validation',
            detail: batchTexts.invalid(3),
            extension: { errors: [{ pointer: '/changes/3/agentId', detail: batchTexts.repeatedAgent }] },
          },
          malformedKey: { summary: 'A malformed Idempotency-Key', kind: 'validation', detail: convenienceTexts.malformedKey },
        }),
        401: problemResponse(401, 'The `x-api-key` header is missing or not valid. Nothing was changed.', {
          unknownKey: { summary: 'Unknown API key', kind: 'unauthorized', detail: partnerTexts.unknownKey },
        }),
        409: problemResponse(
          409,
          'The first batch with this `Idempotency-Key` is still being made; repeat after `Retry-After` seconds.',
          { keyInUse: { summary: 'The Idempotency-Key is in use', kind: 'idempotencyKeyInUse', detail: batchTexts.keyInUse } },
          retryAfterHeader,
        ),
        413: problemResponse(413, `The body is larger than ${batchBodyLimitBytes / 1024} KiB. Nothing was changed.`, {
          tooLarge: { summary: `Body over ${batchBodyLimitBytes / 1024} KiB`, kind: 'payloadTooLarge', detail: batchTexts.bodyTooLarge },
        }),
        415: problemResponse(415, 'The body is not JSON in UTF-8, or has a `Content-Encoding`. Nothing was changed.', {
          notJson: { summary: 'Content-Type other than JSON', kind: 'unsupportedMediaType', detail: partnerTexts.notJson },
        }),
        422: problemResponse(422, 'This `Idempotency-Key` was used within 24 hours for another batch. Nothing was changed.', {
          keyReused: {
            summary: 'The Idempotency-Key was used for another batch',
            kind: 'idempotencyKeyReused',
            detail: batchTexts.keyReused,
          },
        }),
        ...limitResponses,
        429: problemResponse(
          429,
          'The remaining rate-limit allowance of your network cannot hold the batch (each change is one request), or its disables would exceed the disables at once. Nothing was changed and nothing of the allowance was used. Wait for `Retry-After` seconds.',
          {
            rateLimited: { summary: 'The batch does not fit the rate limit', kind: 'rateLimited', detail: batchTexts.rateLimited(1000) },
            tooManyDisables: { summary: 'Too many disables at once', kind: 'tooManyDisables', detail: partnerTexts.tooManyDisables(8) },
          },
          { ...retryAfterHeader, ...rateLimitHeaders },
        ),
        500: problemResponse(500, 'The batch could not be recorded. Repeat it (with the same `Idempotency-Key`, it is never made twice).', {
          databaseUnavailable: { summary: 'The database did not answer', kind: 'dependencyFailure', detail: problemDetails.database },
        }),
      },
    },
    config: {
      openapi: {
        requestBodyExamples: {
          mixed: {
            summary: 'Disable one agent, enable another',
            value: {
              changes: [
                { agentId: exampleAgentId, enabled: false },
                { agentId: secondAgentId, enabled: true },
              ],
            },
          },
        },
      },
    },
  };
}

/** The GET's schema and OpenAPI settings. */
export function readBatchDocumentation() {
  return {
    schema: {
      operationId: 'getAgentStatusBatch',
      summary: 'Read the results of a bulk status change',
      description:
        'The results of a batch of your network as they stand now, for 24 hours after it was sent: each change as its single call would answer it now (a disable still pausing is 202 with the agent’s status until it is finished). A batch of another network gets the same 404 as one that does not exist.',
      tags: ['Agents'],
      security: [{ apiKey: [] }],
      params: Type.Object({ batchId: Type.String({ format: 'uuid', description: 'The batch, from the `Location` of its answer.' }) }),
      response: {
        200: {
          description: 'The results as they stand.',
          content: { 'application/json': { schema: BatchResults, examples: { read: { summary: 'Results', value: resultsExample } } } },
        },
        400: problemResponse(400, 'The batch id is not a UUID.', {
          malformed: { summary: 'A malformed batch id', kind: 'validation', detail: 'params/batchId must match format "uuid"' },
        }),
        401: problemResponse(401, 'The `x-api-key` header is missing or not valid.', {
          unknownKey: { summary: 'Unknown API key', kind: 'unauthorized', detail: partnerTexts.unknownKey },
        }),
        404: problemResponse(404, 'No batch with this id in your network (or it is older than 24 hours).', {
          notFound: { summary: 'No such batch', kind: 'notFound', detail: batchTexts.notFound },
        }),
        ...limitResponses,
      },
    },
  };
}
