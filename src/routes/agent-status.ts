import { Type, type FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { SetAgentStatus } from '../agents/set-agent-status.js';
import type { PartnerKeyStore } from '../auth/partner-keys.js';
import { createApiKeyHook } from '../auth/api-key-hook.js';
import { dependencyFailureDetails } from '../errors.js';
import type { Metrics } from '../observability/metrics.js';
import { problemResponse, ProblemSchema } from './problem-schema.js';

export const agentIdPattern = '^us-east-1:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';

// Documentation only (the examples of the OpenAPI document); none of this is read at run time.
const exampleAgentId = 'us-east-1:3f1c2b9e-5d4a-4e8f-9a7b-1c2d3e4f5a6b';
const exampleNetworkId = '8d2f6a4c-1b3e-4f5a-9c7d-0e1f2a3b4c5d';

export const AgentStatusRequest = Type.Object(
  {
    agentId: Type.String({ pattern: agentIdPattern, description: 'Agent to update, `us-east-1:<uuid>`; must belong to your network.', examples: [exampleAgentId] }),
    enabled: Type.Boolean({ description: '`false` disables the agent and pauses its campaigns; `true` enables it and resumes nothing.' }),
  },
  { additionalProperties: false, description: 'The agent and the state to set: exactly these two properties, anything else is a 400.' },
);

export const AgentStatusResponse = Type.Object(
  {
    agentId: Type.String({ pattern: agentIdPattern, description: 'The agent you updated, `us-east-1:<uuid>`.' }),
    networkId: Type.String({ format: 'uuid', description: 'The network of your API key.' }),
    enabled: Type.Boolean({ description: 'The resulting state: `false` after a disable, `true` after an enable.' }),
    pausedCampaignCount: Type.Integer({
      minimum: 0,
      description: 'Campaigns this call moved from unpaused to paused; `0` on enable, and `0` when a repeated disable finds nothing left to pause.',
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
  'Repeating a request is always safe. A 500 means the request did not complete (on a disable, typically a system holding campaign state did not confirm a pause, so the agent may be disabled with some campaigns not yet paused): repeating the same request completes the job.',
].join('\n');

export interface AgentStatusRouteDeps {
  keyStore: PartnerKeyStore;
  setAgentStatus: SetAgentStatus;
  metrics: Metrics;
}

export const agentStatusRoute: FastifyPluginAsyncTypebox<AgentStatusRouteDeps> = async (app, { keyStore, setAgentStatus, metrics }) => {
  app.addSchema(ProblemSchema);
  app.post(
    '/partner/agents/status',
    {
      onRequest: createApiKeyHook(keyStore, metrics),
      schema: {
        operationId: 'setAgentStatus',
        summary: 'Enable or disable an agent of your network',
        description: operationDescription,
        tags: ['Agents'],
        security: [{ apiKey: [] }],
        body: AgentStatusRequest,
        response: {
          200: {
            description: 'The agent now has the requested state. Also the answer to a repeated request.',
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
          400: problemResponse(400, 'The body is not a JSON object with exactly `agentId` (`us-east-1:<uuid>`) and `enabled` (boolean), or is not valid JSON. Nothing was changed.', {
            unknownProperty: { summary: 'A property other than agentId and enabled', kind: 'validation', detail: 'unknown property "networkId"; only agentId and enabled are accepted' },
            malformedAgentId: { summary: 'agentId not of the form us-east-1:<uuid>', kind: 'validation', detail: 'agentId must have the form us-east-1:<uuid> (lowercase hexadecimal)' },
            wrongType: { summary: 'enabled given as a string', kind: 'validation', detail: 'enabled must be of type boolean' },
            malformedJson: { summary: 'A body that is not valid JSON', kind: 'validation', detail: 'body is not valid JSON' },
          }),
          401: problemResponse(401, 'The `x-api-key` header is missing or holds no valid key. Checked before anything else, whatever the body.', {
            missing: { summary: 'No x-api-key header', kind: 'unauthorized', detail: 'x-api-key header is required' },
            unknown: { summary: 'A key that is not valid', kind: 'unauthorized', detail: 'API key is not valid' },
          }),
          404: problemResponse(404, 'No agent with this `agentId` exists in your network. An agent of another network gets exactly this answer, byte for byte apart from the request id. Nothing was changed.', {
            notInNetwork: { summary: 'Agent not in your network', kind: 'notFound', detail: 'No agent with this agentId exists in your network.' },
          }),
          413: problemResponse(413, `The body is larger than ${app.initialConfig.bodyLimit! / 1024} KiB. Nothing was changed.`, {
            tooLarge: { summary: 'Body over 16 KiB', kind: 'payloadTooLarge', detail: 'The request body must be at most 16 KiB.' },
          }),
          415: problemResponse(415, 'The `Content-Type` is not `application/json`. Nothing was changed.', {
            notJson: { summary: 'Content-Type other than JSON', kind: 'unsupportedMediaType', detail: 'Content-Type must be application/json.' },
          }),
          500: problemResponse(500, 'The request did not complete. On a disable the agent may already be disabled with some campaigns not yet paused. Repeat the same request (it is always safe) until it answers 200: that completes the job.', {
            pauseNotConfirmed: {
              summary: 'A system holding campaign state did not confirm a pause',
              kind: 'dependencyFailure',
              detail: dependencyFailureDetails.pause,
            },
            databaseUnavailable: { summary: 'The database did not answer', kind: 'dependencyFailure', detail: dependencyFailureDetails.database },
            unexpected: { summary: 'An unexpected error', kind: 'internal', detail: 'An unexpected error occurred.' },
          }),
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
    },
    async (request) => {
      const partner = request.partner!;
      const { agentId, enabled } = request.body;
      request.audit.agentId = agentId;
      request.audit.enabled = enabled;
      try {
        const status = await setAgentStatus({ networkId: partner.networkId, agentId, enabled });
        request.audit.outcome = 'updated';
        metrics.agentStatusChanges.inc({ partner: partner.name, enabled: String(enabled), outcome: 'updated' });
        if (status.pausedCampaignCount > 0) metrics.campaignsPaused.inc({ partner: partner.name }, status.pausedCampaignCount);
        return status;
      } catch (error) {
        const outcome = (error as Error).name === 'AgentNotInNetwork' ? 'not_found' : 'failed';
        request.audit.outcome = outcome;
        metrics.agentStatusChanges.inc({ partner: partner.name, enabled: String(enabled), outcome });
        throw error;
      }
    },
  );
};
