// The documentation of POST /partner/agents/status: its schemas, examples and texts, as the
// OpenAPI document and the reference page show them. The handler is agent-status.ts.
import { Type } from '@fastify/type-provider-typebox';
import { documentedPath, partnerRoutes } from '../paths.js';
import { bodyLimitBytes, convenienceTexts, partnerTexts, problemDetails } from '../problems.js';
import { problemResponse } from './problem-schema.js';

export const agentIdPattern = '^us-east-1:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';

// Documentation only (the examples of the OpenAPI document); none of this is read at run time.
export const exampleAgentId = 'us-east-1:3f1c2b9e-5d4a-4e8f-9a7b-1c2d3e4f5a6b';
export const exampleNetworkId = '8d2f6a4c-1b3e-4f5a-9c7d-0e1f2a3b4c5d';

// Response headers as @fastify/swagger takes them: one schema each (it wraps them for OpenAPI).
export const retryAfterHeader = {
  'retry-after': { type: 'string', pattern: '^[1-9][0-9]*$', description: 'Seconds to wait before repeating the request.' },
};
export const rateLimitHeaders = {
  'ratelimit-policy': {
    type: 'string',
    description: 'The IETF draft RateLimit-Policy field, `"partner";q=<requests>;w=<window seconds>`, while a rate limit is configured.',
  },
  ratelimit: {
    type: 'string',
    description: 'The IETF draft RateLimit field, `"partner";r=<requests left>;t=<seconds until the window resets>`.',
  },
};

/** The statuses every partner route shares beyond its own: the limits of docs/interfaces.md §10. */
export const limitResponses = {
  429: problemResponse(
    429,
    'Your network has used up its requests for this window (rate limit, counted across all replicas), or, on a disable, already has the maximum number of agents being disabled at once. Nothing was changed. Wait for `Retry-After` seconds.',
    {
      rateLimited: { summary: 'Rate limit exceeded', kind: 'rateLimited', detail: problemDetails.rateLimited },
      tooManyDisables: {
        summary: 'Too many disables in flight',
        kind: 'tooManyDisables',
        detail: partnerTexts.tooManyDisables(8),
      },
    },
    { ...retryAfterHeader, ...rateLimitHeaders },
  ),
  503: problemResponse(
    503,
    'The service is overloaded or shutting down. Nothing was changed. Repeat after `Retry-After` seconds.',
    {
      unavailable: { summary: 'Shedding load', kind: 'unavailable', detail: problemDetails.unavailable },
      poolFull: { summary: 'No database connection free in time', kind: 'unavailable', detail: problemDetails.poolFull },
    },
    retryAfterHeader,
  ),
};

/** The status of an agent (docs/interfaces.md §9): the GET's answer and the body of a 202. */
export const AgentStatusView = Type.Object(
  {
    agentId: Type.String({ pattern: agentIdPattern, description: 'The agent, `us-east-1:<uuid>`.' }),
    networkId: Type.String({ format: 'uuid', description: 'The network of your API key.' }),
    enabled: Type.Boolean({ description: "The agent's approval (`agentApproved`)." }),
    activeUnpausedCampaignCount: Type.Integer({ minimum: 0, description: 'Campaigns of the agent that are active and not paused.' }),
    disableInProgress: Type.Boolean({
      description:
        'true while an accepted disable is still pausing campaigns (the service finishes it by itself); false once it is done or superseded by an enable.',
    }),
  },
  { additionalProperties: false },
);

/** The status of an agent whose disable is still pausing campaigns (the GET's example and the 202's). */
export const disablingExample = {
  agentId: exampleAgentId,
  networkId: exampleNetworkId,
  enabled: false,
  activeUnpausedCampaignCount: 40,
  disableInProgress: true,
};

/** Idempotent-Replayed on an answer repeated for an Idempotency-Key (docs/interfaces.md §11). */
export const replayedHeader = {
  'idempotent-replayed': {
    type: 'string',
    enum: ['true'],
    description: 'Present, `true`, when this is the kept answer of an earlier request with the same `Idempotency-Key`.',
  },
};

/** The request headers of §11 that the POST reads; validated by the handler, so that each has its own 400. */
const ConvenienceHeaders = Type.Object({
  'idempotency-key': Type.Optional(
    Type.String({
      description:
        'Makes the request safe to repeat for 24 hours: 1 to 255 printable ASCII characters (a UUID, say), sent once, chosen by you and scoped to your network. A repeat with the same key and the same body answers the first final answer again (200, 202, 404 or 409) with `Idempotent-Replayed: true`, without doing anything; the same key with another body is a 422; while the first request still runs, a 409 with `Retry-After`. Keys are stored hashed, a value holding an API key is refused (400), and your network may hold a limited number of keys (429 past it). After any other answer the key is forgotten and a repeat runs again, unless the change was made before it (a disable recorded before its 500, an answer lost after the commit): then a repeat answers as that change stands and never makes it again.',
      examples: ['6f1b7f0e-3c0a-4f4e-9a55-2b1d8c7e9f10'],
    }),
  ),
  'if-match': Type.Optional(
    Type.String({
      description: `Makes the change only if the agent has not changed since you read its status: the \`ETag\` of \`GET ${documentedPath(partnerRoutes.agentStatusRead)}\` (strong comparison; several tags may be listed). Otherwise 412 and nothing is changed or recorded. \`*\` always matches an agent of your network.`,
      examples: ['"v12"'],
    }),
  ),
  prefer: Type.Optional(
    Type.String({
      description:
        'RFC 7240, disables only. `respond-async`: answer 202 as soon as the disable is recorded (the agent disabled, pausing going on) instead of waiting for every campaign to be paused. `respond-async, wait=N`: the usual answer if it is ready within N seconds, else 202. Other preferences are ignored.',
      examples: ['respond-async, wait=5'],
    }),
  ),
});

const AgentStatusRequest = Type.Object(
  {
    agentId: Type.String({
      pattern: agentIdPattern,
      description: 'Agent to update, `us-east-1:<uuid>`; must belong to your network.',
      examples: [exampleAgentId],
    }),
    enabled: Type.Boolean({ description: '`false` disables the agent and pauses its campaigns; `true` enables it and resumes nothing.' }),
  },
  { additionalProperties: false, description: 'The agent and the state to set: exactly these two properties, anything else is a 400.' },
);

const AgentStatusResponse = Type.Object(
  {
    agentId: Type.String({ pattern: agentIdPattern, description: 'The agent you updated, `us-east-1:<uuid>`.' }),
    networkId: Type.String({ format: 'uuid', description: 'The network of your API key.' }),
    enabled: Type.Boolean({ description: 'The resulting state: `false` after a disable, `true` after an enable.' }),
    pausedCampaignCount: Type.Integer({
      minimum: 0,
      description:
        'Campaigns this call moved from unpaused to paused; `0` on enable, and `0` when a repeated disable finds nothing left to pause.',
    }),
  },
  { additionalProperties: false },
);

const operationDescription = [
  'Sets the approval of one agent of your network. The network is always the one your API key is bound to; it is never taken from the request.',
  '',
  '- `enabled: false` disables the agent: `agentApproved` becomes `false`, then every active, currently unpaused campaign of the agent is paused in every system that holds campaign state (the relational database, the spending periods of the spend-management system and the key-value store). `pausedCampaignCount` is the number of campaigns this call paused.',
  '- `enabled: true` enables the agent: `agentApproved` becomes `true`. No campaign is resumed: campaigns paused by an earlier disable stay paused until the agent (once approved again) or a manager resumes them. `pausedCampaignCount` is `0`.',
  '',
  'An agent that is not in your network gets a 404 identical to the one for an agent that does not exist at all.',
  '',
  `A disable the service has accepted is never lost. When it cannot pause every campaign within the request (a system holding campaign state failed or did not confirm some campaigns, or the work takes longer than the request may), it answers 500 with \`pausedCampaignCount\` and \`remainingCampaignCount\`, and goes on pausing the rest by itself: \`GET ${documentedPath(partnerRoutes.agentStatusRead)}\` shows the progress. Repeating the request is always safe.`,
  '',
  'An enable answered after a disable was requested supersedes it: that disable stops pausing and answers 409.',
  '',
  "Optional conveniences: `Prefer: respond-async` (202 once a disable is recorded), `Idempotency-Key` (repeats answered from the first answer for 24 hours) and `If-Match` with the status endpoint's `ETag` (412 when the agent changed since you read it).",
].join('\n');

/** The route's schema and OpenAPI settings. */
export function setAgentStatusDocumentation() {
  return {
    schema: {
      operationId: 'setAgentStatus',
      summary: 'Enable or disable an agent of your network',
      description: operationDescription,
      tags: ['Agents'],
      security: [{ apiKey: [] }],
      headers: ConvenienceHeaders,
      body: AgentStatusRequest,
      response: {
        200: {
          description: 'The agent now has the requested state. Also the answer to a repeated request.',
          headers: { ...rateLimitHeaders, ...replayedHeader },
          content: {
            'application/json': {
              schema: AgentStatusResponse,
              examples: {
                disabled: {
                  summary: 'Disable: three campaigns paused',
                  value: { agentId: exampleAgentId, networkId: exampleNetworkId, enabled: false, pausedCampaignCount: 3 },
                },
                enabled: {
                  summary: 'Enable: nothing resumed',
                  value: { agentId: exampleAgentId, networkId: exampleNetworkId, enabled: true, pausedCampaignCount: 0 },
                },
              },
            },
          },
        },
        202: {
          description:
            'Sent with `Prefer: respond-async`: the disable is recorded (the agent is disabled, its pending disable and change row committed) and its campaigns are being paused; the service finishes by itself. `Location` is the status endpoint that shows the progress; the body is its status at that moment.',
          headers: {
            location: { type: 'string', description: `The agent's status endpoint, \`${documentedPath(partnerRoutes.agentStatusRead)}\`.` },
            'preference-applied': { type: 'string', enum: ['respond-async'], description: 'The preference that was applied.' },
            ...rateLimitHeaders,
            ...replayedHeader,
          },
          content: {
            'application/json': {
              schema: AgentStatusView,
              examples: {
                accepted: { summary: 'Disable accepted, 40 campaigns still to pause', value: disablingExample },
              },
            },
          },
        },
        400: problemResponse(
          400,
          'The body is not a JSON object with exactly `agentId` (`us-east-1:<uuid>`) and `enabled` (boolean), is not valid JSON, repeats a member name in one object, or `Idempotency-Key` is malformed. Nothing was changed.',
          {
            unknownProperty: {
              summary: 'A property other than agentId and enabled',
              kind: 'validation',
              detail: 'unknown property "networkId"; only agentId and enabled are accepted',
            },
            malformedAgentId: {
              summary: 'agentId not of the form us-east-1:<uuid>',
              kind: 'validation',
              detail: 'agentId must have the form us-east-1:<uuid> (lowercase hexadecimal)',
            },
            wrongType: { summary: 'enabled given as a string', kind: 'validation', detail: 'enabled must be of type boolean' },
            malformedJson: { summary: 'A body that is not valid JSON', kind: 'validation', detail: 'body is not valid JSON' },
            malformedIdempotencyKey: { summary: 'A malformed Idempotency-Key', kind: 'validation', detail: convenienceTexts.malformedKey },
            duplicateMember: { summary: 'A member name twice in one object', kind: 'validation', detail: partnerTexts.duplicateMember },
          },
        ),
        401: problemResponse(
          401,
          'The `x-api-key` header is missing or holds no valid key. Checked before anything else, whatever the body.',
          {
            missing: { summary: 'No x-api-key header', kind: 'unauthorized', detail: partnerTexts.missingKey },
            unknown: { summary: 'A key that is not valid', kind: 'unauthorized', detail: partnerTexts.unknownKey },
          },
        ),
        404: problemResponse(
          404,
          'No agent with this `agentId` exists in your network. An agent of another network gets exactly this answer, byte for byte apart from the request id. Nothing was changed.',
          {
            notInNetwork: {
              summary: 'Agent not in your network',
              kind: 'notFound',
              detail: partnerTexts.notInNetwork,
            },
          },
        ),
        413: problemResponse(413, `The body is larger than ${bodyLimitBytes / 1024} KiB. Nothing was changed.`, {
          tooLarge: { summary: `Body over ${bodyLimitBytes / 1024} KiB`, kind: 'payloadTooLarge', detail: partnerTexts.bodyTooLarge },
        }),
        415: problemResponse(
          415,
          'The `Content-Type` is not `application/json`, names a `charset` other than UTF-8, or the body has a `Content-Encoding` (none is accepted). Nothing was changed.',
          {
            notJson: { summary: 'Content-Type other than JSON', kind: 'unsupportedMediaType', detail: partnerTexts.notJson },
            notUtf8: { summary: 'A charset other than UTF-8', kind: 'unsupportedMediaType', detail: partnerTexts.notUtf8 },
            encoded: { summary: 'A Content-Encoding', kind: 'unsupportedMediaType', detail: partnerTexts.encoded },
          },
        ),
        409: problemResponse(
          409,
          'An enable of this agent was answered after this disable was requested: the disable stopped pausing campaigns (`pausedCampaignCount` says how many it paused before). The agent is enabled. Or: the first request with this `Idempotency-Key` is still running, or this request outlived its hold on the key and a repeat took it over (this request then changed nothing); repeat after `Retry-After` seconds.',
          {
            superseded: {
              summary: 'Superseded by a later enable',
              kind: 'superseded',
              detail: problemDetails.superseded,
              extension: { pausedCampaignCount: 12 },
            },
            keyInUse: { summary: 'The Idempotency-Key is in use', kind: 'idempotencyKeyInUse', detail: convenienceTexts.keyInUse },
            keyLost: {
              summary: 'A repeat took the Idempotency-Key over; this request changed nothing',
              kind: 'idempotencyKeyInUse',
              detail: convenienceTexts.keyLost,
            },
          },
          { ...retryAfterHeader, ...replayedHeader },
        ),
        412: problemResponse(
          412,
          "The `If-Match` tag is not the agent's current `ETag`: the agent changed since you read it. Nothing was changed or recorded.",
          {
            preconditionFailed: {
              summary: 'The agent changed since it was read',
              kind: 'preconditionFailed',
              detail: convenienceTexts.preconditionFailed,
            },
          },
        ),
        422: problemResponse(422, 'This `Idempotency-Key` was used within 24 hours for a request with another body. Nothing was changed.', {
          keyReused: {
            summary: 'The Idempotency-Key was used for another request',
            kind: 'idempotencyKeyReused',
            detail: convenienceTexts.keyReused,
          },
        }),
        ...limitResponses,
        429: problemResponse(
          429,
          'Your network has used up its requests for this window (rate limit, counted across all replicas); or, on a disable, already has the maximum number of agents being disabled at once; or the request sent a new `Idempotency-Key` while your network holds its quota of them (each is kept 24 hours). Nothing was changed. Wait for `Retry-After` seconds.',
          {
            rateLimited: { summary: 'Rate limit exceeded', kind: 'rateLimited', detail: problemDetails.rateLimited },
            tooManyDisables: { summary: 'Too many disables in flight', kind: 'tooManyDisables', detail: partnerTexts.tooManyDisables(8) },
            keyQuota: { summary: 'Too many Idempotency-Keys', kind: 'idempotencyKeyQuota', detail: convenienceTexts.keyQuota },
          },
          { ...retryAfterHeader, ...rateLimitHeaders },
        ),
        500: problemResponse(
          500,
          'The request did not complete. On a disable whose agent is already disabled, `pausedCampaignCount` and `remainingCampaignCount` say how far it got, and the service goes on pausing the rest by itself (the status endpoint shows the progress). Repeating the request is always safe.',
          {
            pauseNotConfirmed: {
              summary: 'A system holding campaign state did not confirm every pause',
              kind: 'dependencyFailure',
              detail: problemDetails.pause,
              extension: { pausedCampaignCount: 200, remainingCampaignCount: 40 },
            },
            deadline: {
              summary: 'Pausing takes longer than one request may',
              kind: 'dependencyFailure',
              detail: problemDetails.deadline,
              extension: { pausedCampaignCount: 9000, remainingCampaignCount: 3000 },
            },
            databaseUnavailable: { summary: 'The database did not answer', kind: 'dependencyFailure', detail: problemDetails.database },
            unexpected: { summary: 'An unexpected error', kind: 'internal', detail: problemDetails.unexpected },
          },
        ),
      },
    },
    config: {
      openapi: {
        requestBodyExamples: {
          disable: { summary: 'Disable an agent and pause its campaigns', value: { agentId: exampleAgentId, enabled: false } },
          enable: { summary: 'Enable an agent (resumes nothing)', value: { agentId: exampleAgentId, enabled: true } },
        },
      },
    },
  };
}
