import { Type, type FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { SetAgentStatus } from '../agents/set-agent-status.js';
import type { PartnerKeyStore } from '../auth/partner-keys.js';
import { createApiKeyHook } from '../auth/api-key-hook.js';
import type { Metrics } from '../observability/metrics.js';
import { ProblemSchema } from './problem-schema.js';

export const agentIdPattern = '^us-east-1:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';

export const AgentStatusRequest = Type.Object(
  {
    agentId: Type.String({ pattern: agentIdPattern, description: 'Agent to update, `us-east-1:<uuid>`; must belong to your network.', examples: ['us-east-1:3f1c2b9e-5d4a-4e8f-9a7b-1c2d3e4f5a6b'] }),
    enabled: Type.Boolean({ description: '`false` disables the agent and pauses its campaigns; `true` enables it and resumes nothing.' }),
  },
  { additionalProperties: false },
);

export const AgentStatusResponse = Type.Object(
  {
    agentId: Type.String({ pattern: agentIdPattern }),
    networkId: Type.String({ format: 'uuid', description: 'The network of your API key.' }),
    enabled: Type.Boolean({ description: 'The resulting state.' }),
    pausedCampaignCount: Type.Integer({ minimum: 0, description: 'Campaigns this call paused; 0 on enable.' }),
  },
  { additionalProperties: false },
);

export interface AgentStatusRouteDeps {
  keyStore: PartnerKeyStore;
  setAgentStatus: SetAgentStatus;
  metrics: Metrics;
}

export const agentStatusRoute: FastifyPluginAsyncTypebox<AgentStatusRouteDeps> = async (app, { keyStore, setAgentStatus, metrics }) => {
  app.post(
    '/partner/agents/status',
    {
      onRequest: createApiKeyHook(keyStore, metrics),
      schema: {
        operationId: 'setAgentStatus',
        summary: 'Enable or disable an agent of your network',
        body: AgentStatusRequest,
        response: {
          200: AgentStatusResponse,
          '4xx': ProblemSchema,
          '5xx': ProblemSchema,
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
