import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AgentStatusUseCase } from '../../agents/set-agent-status.js';
import { etagOf } from '../conveniences.js';
import { partnerRoutes } from '../paths.js';
import { readAgentStatusDocumentation } from './agent-status-read.schema.js';

export interface AgentStatusReadRouteDeps {
  agentStatus: AgentStatusUseCase;
}

/** GET /partner/agents/{agentId}/status (docs/interfaces.md §9): reads, never changes anything. */
export const agentStatusReadRoute: FastifyPluginAsyncTypebox<AgentStatusReadRouteDeps> = async (app, { agentStatus }) => {
  app.get(
    partnerRoutes.agentStatusRead,
    {
      ...readAgentStatusDocumentation(),
    },
    async (request, reply) => {
      const { agentId } = request.params;
      request.audit.agentId = agentId;
      const { latestChangeId, ...status } = await agentStatus.readAgentStatus(request.partner!.networkId, agentId);
      request.audit.outcome = 'read';
      // Only on the 200: the 404 stays the same whether the agent exists elsewhere or nowhere.
      reply.header('etag', etagOf(latestChangeId));
      return status;
    },
  );
};
