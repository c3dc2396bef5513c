// The documentation of GET /partner/agents/{agentId}/status: its schemas, examples and texts. The
// handler is agent-status-read.ts.
import { Type } from '@fastify/type-provider-typebox';
import { documentedPath, partnerRoutes } from '../paths.js';
import { partnerTexts, problemDetails } from '../problems.js';
import {
  AgentStatusView,
  agentIdPattern,
  disablingExample,
  exampleAgentId,
  exampleNetworkId,
  limitResponses,
  rateLimitHeaders,
} from './agent-status.schema.js';
import { problemResponse } from './problem-schema.js';

/** The route's schema and OpenAPI settings. */
export function readAgentStatusDocumentation() {
  return {
    schema: {
      operationId: 'getAgentStatus',
      summary: 'Read the status of an agent of your network',
      description:
        "The agent's approval, how many of its campaigns are active and unpaused, and whether a disable is still in progress. " +
        'The agent id goes in the path as is (`us-east-1:<uuid>`, the colon may be percent-encoded as `%3A`). ' +
        'Same key rules as the status change: an agent of another network gets a 404 identical to the one for an agent that does not exist. ' +
        "The `ETag` names the agent's latest status change: send it as `If-Match` with a status change to make it only if nothing changed since.",
      tags: ['Agents'],
      security: [{ apiKey: [] }],
      params: Type.Object({
        agentId: Type.String({ pattern: agentIdPattern, description: 'The agent, `us-east-1:<uuid>`.', examples: [exampleAgentId] }),
      }),
      response: {
        200: {
          description: "The agent's status.",
          headers: {
            etag: {
              type: 'string',
              pattern: '^"[^"]*"$',
              description: `Strong entity tag naming the agent's latest status change (opaque): it changes exactly when a status change is recorded, not when counts change. Send it as \`If-Match\` on \`POST ${documentedPath(partnerRoutes.agentStatus)}\`.`,
            },
            ...rateLimitHeaders,
          },
          content: {
            'application/json': {
              schema: AgentStatusView,
              examples: {
                disabling: { summary: 'A disable still pausing campaigns', value: disablingExample },
                disabled: {
                  summary: 'Disabled, every campaign paused',
                  value: {
                    agentId: exampleAgentId,
                    networkId: exampleNetworkId,
                    enabled: false,
                    activeUnpausedCampaignCount: 0,
                    disableInProgress: false,
                  },
                },
              },
            },
          },
        },
        400: problemResponse(400, 'The agent id in the path is not of the form `us-east-1:<uuid>`.', {
          malformedAgentId: {
            summary: 'agentId not of the form us-east-1:<uuid>',
            kind: 'validation',
            detail: 'agentId must have the form us-east-1:<uuid> (lowercase hexadecimal)',
          },
        }),
        401: problemResponse(401, 'The `x-api-key` header is missing or holds no valid key.', {
          missing: { summary: 'No x-api-key header', kind: 'unauthorized', detail: partnerTexts.missingKey },
        }),
        404: problemResponse(
          404,
          'No agent with this `agentId` exists in your network (byte for byte the same whether it exists elsewhere or nowhere).',
          {
            notInNetwork: {
              summary: 'Agent not in your network',
              kind: 'notFound',
              detail: partnerTexts.notInNetwork,
            },
          },
        ),
        ...limitResponses,
        500: problemResponse(500, 'The database did not answer. Repeat the request.', {
          databaseUnavailable: { summary: 'The database did not answer', kind: 'dependencyFailure', detail: problemDetails.database },
        }),
      },
    },
  };
}
