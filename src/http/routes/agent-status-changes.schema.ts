// The documentation of GET /partner/agents/{agentId}/status-changes: its schemas, examples and
// texts. The handler is agent-status-changes.ts.
import { Type } from '@fastify/type-provider-typebox';
import { convenienceTexts, partnerTexts, problemDetails } from '../problems.js';
import { agentIdPattern, exampleAgentId, limitResponses, rateLimitHeaders } from './agent-status.schema.js';
import { problemResponse } from './problem-schema.js';

const StatusChange = Type.Object(
  {
    changeId: Type.Integer({
      minimum: 1,
      description: "The change's number among this agent's changes (1 for its first, then 2, 3, …); page with `before`.",
    }),
    enabled: Type.Boolean({ description: '`false`: a disable was recorded; `true`: an enable.' }),
    partnerName: Type.String({ description: 'The name of the API key that asked for it (never the key).' }),
    requestId: Type.Union([Type.String(), Type.Null()], { description: 'The `x-request-id` of the request that asked for it.' }),
    changedAt: Type.String({ format: 'date-time', description: 'When it was recorded (UTC).' }),
  },
  { additionalProperties: false },
);

const StatusChanges = Type.Object(
  {
    agentId: Type.String({ pattern: agentIdPattern, description: 'The agent, `us-east-1:<uuid>`.' }),
    changes: Type.Array(StatusChange, { description: 'Newest first, at most `limit`.' }),
    nextBefore: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()], {
      description: 'The `before` of the next (older) page; `null` on the last page.',
    }),
  },
  { additionalProperties: false },
);

/** The route's schema and OpenAPI settings. */
export function readStatusChangesDocumentation() {
  return {
    schema: {
      operationId: 'listAgentStatusChanges',
      summary: 'Read the status changes of an agent of your network',
      description:
        'Who disabled or enabled the agent, and when: every status change recorded for it (repeats included), newest first, a page at a time. ' +
        'Pass the `nextBefore` of a page as `before` to get the next, older one. Same key rules as the status endpoint: an agent of another network gets a 404 identical to the one for an agent that does not exist.',
      tags: ['Agents'],
      security: [{ apiKey: [] }],
      params: Type.Object({
        agentId: Type.String({ pattern: agentIdPattern, description: 'The agent, `us-east-1:<uuid>`.', examples: [exampleAgentId] }),
      }),
      querystring: Type.Object({
        limit: Type.Optional(
          Type.String({ pattern: '^(100|[1-9][0-9]?)$', description: 'Changes per page, 1 to 100 (default 20).', examples: ['20'] }),
        ),
        before: Type.Optional(
          Type.String({
            pattern: '^[1-9][0-9]{0,18}$',
            description: 'Only changes older than this `changeId`: the `nextBefore` of the previous page.',
            examples: ['1289'],
          }),
        ),
      }),
      response: {
        200: {
          description: "A page of the agent's status changes.",
          headers: rateLimitHeaders,
          content: {
            'application/json': {
              schema: StatusChanges,
              examples: {
                page: {
                  summary: 'A disable, after an enable, with more pages',
                  value: {
                    agentId: exampleAgentId,
                    changes: [
                      {
                        changeId: 12,
                        enabled: false,
                        partnerName: 'acme-console',
                        requestId: '0f6b1d5e-8a43-4c27-b9e2-5d17c3a8f604',
                        changedAt: '2026-11-24T09:12:44.120518Z',
                      },
                      {
                        changeId: 11,
                        enabled: true,
                        partnerName: 'acme-automation',
                        requestId: null,
                        changedAt: '2026-11-23T17:02:10.004211Z',
                      },
                    ],
                    nextBefore: 11,
                  },
                },
              },
            },
          },
        },
        400: problemResponse(400, 'The agent id in the path is malformed, or `limit` or `before` is not a whole number in range.', {
          malformedQuery: { summary: 'limit out of range', kind: 'validation', detail: convenienceTexts.historyQuery },
        }),
        401: problemResponse(401, 'The `x-api-key` header is missing or holds no valid key.', {
          missing: { summary: 'No x-api-key header', kind: 'unauthorized', detail: partnerTexts.missingKey },
        }),
        404: problemResponse(
          404,
          'No agent with this `agentId` exists in your network (byte for byte the same whether it exists elsewhere or nowhere).',
          { notInNetwork: { summary: 'Agent not in your network', kind: 'notFound', detail: partnerTexts.notInNetwork } },
        ),
        ...limitResponses,
        500: problemResponse(500, 'The database did not answer. Repeat the request.', {
          databaseUnavailable: { summary: 'The database did not answer', kind: 'dependencyFailure', detail: problemDetails.database },
        }),
      },
    },
  };
}
