import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AgentStatusUseCase } from '../../agents/set-agent-status.js';
import { partnerRoutes } from '../paths.js';
import { convenienceTexts, problem, sendProblem } from '../problems.js';
import { readStatusChangesDocumentation } from './agent-status-changes.schema.js';

export interface StatusChangesRouteDeps {
  agentStatus: AgentStatusUseCase;
}

const largestChangeId = 9223372036854775807n;

/** GET /partner/agents/{agentId}/status-changes (docs/interfaces.md §11): the agent's change rows, a page at a time. */
export const statusChangesRoute: FastifyPluginAsyncTypebox<StatusChangesRouteDeps> = async (app, { agentStatus }) => {
  app.get(
    partnerRoutes.statusChanges,
    {
      // The query's own 400 says what limit and before must be; other validation errors as usual.
      attachValidation: true,
      ...readStatusChangesDocumentation(),
    },
    async (request, reply) => {
      const error = request.validationError;
      if (error && (error as { validationContext?: string }).validationContext !== 'querystring') throw error;
      const { limit, before } = request.query;
      if (error || (before !== undefined && BigInt(before) > largestChangeId)) {
        return sendProblem(reply, problem('validation', convenienceTexts.historyQuery, request.id));
      }
      const { agentId } = request.params;
      request.audit.agentId = agentId;
      const page = await agentStatus.readStatusChanges(request.partner!.networkId, agentId, before ?? null, Number(limit ?? 20));
      request.audit.outcome = 'read';
      return {
        agentId,
        changes: page.changes.map((change) => ({ ...change, changeId: Number(change.changeId) })),
        nextBefore: page.nextBefore === null ? null : Number(page.nextBefore),
      };
    },
  );
};
