import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { onRequestAsyncHookHandler } from 'fastify';
import type { AgentStatusUseCase } from '../../agents/set-agent-status.js';
import type { Metrics } from '../../observability/metrics.js';
import { setAgentStatusDocumentation } from './agent-status.schema.js';

export interface AgentStatusRouteDeps {
  agentStatus: AgentStatusUseCase;
  metrics: Metrics;
  /** Authentication and the rate limit (src/http/partner-guard.ts). */
  guard: onRequestAsyncHookHandler[];
  requestDeadlineMs: number;
}

export const agentStatusRoute: FastifyPluginAsyncTypebox<AgentStatusRouteDeps> = async (
  app,
  { agentStatus, metrics, guard, requestDeadlineMs },
) => {
  app.post(
    '/partner/agents/status',
    {
      onRequest: guard,
      ...setAgentStatusDocumentation(),
    },
    async (request, reply) => {
      const partner = request.partner!;
      const { agentId, enabled } = request.body;
      request.audit.agentId = agentId;
      request.audit.enabled = enabled;
      try {
        const status = await agentStatus.setAgentStatus({
          networkId: partner.networkId,
          agentId,
          enabled,
          partnerName: partner.name,
          requestId: request.id,
          deadline: Date.now() + requestDeadlineMs - reply.elapsedTime,
        });
        request.audit.outcome = 'updated';
        metrics.agentStatusChanges.inc({ partner: partner.name, enabled: String(enabled), outcome: 'updated' });
        return status;
      } catch (error) {
        const name = (error as Error).name;
        if (name === 'TooManyDisables') {
          request.audit.outcome = 'limited';
          metrics.requestsLimited.inc({ partner: partner.name, limit: 'disables_in_flight' });
          throw error;
        }
        const outcome = name === 'AgentNotInNetwork' ? 'not_found' : name === 'DisableSuperseded' ? 'superseded' : 'failed';
        request.audit.outcome = outcome;
        metrics.agentStatusChanges.inc({ partner: partner.name, enabled: String(enabled), outcome });
        throw error;
      }
    },
  );
};
