import { performance } from 'node:perf_hooks';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AgentStatusUseCase } from '../../agents/set-agent-status.js';
import type { Metrics } from '../../observability/metrics.js';
import type { IdempotencyKeys } from '../../stores/idempotency-keys.js';
import { waitingUntil } from '../../stores/pool-wait.js';
import { answerOf, type ChangeResult, sendAnswer } from '../answers.js';
import { versionOf } from '../api-version-hooks.js';
import { idempotencyHooks, ifMatchChangeIds, readPrefer } from '../conveniences.js';
import { partnerRoutes, statusChangeRouteLabel } from '../paths.js';
import { setAgentStatusDocumentation } from './agent-status.schema.js';

export interface AgentStatusRouteDeps {
  agentStatus: AgentStatusUseCase;
  metrics: Metrics;
  requestDeadlineMs: number;
  idempotencyKeys: IdempotencyKeys;
  /** Whether a value is a partner key (never stored as an idempotency key). */
  isApiKey: (value: string) => boolean;
}

/** How long before its deadline a disable asked to respond asynchronously answers 202 at the latest. */
const acceptBeforeDeadlineMs = 1_000;

export const agentStatusRoute: FastifyPluginAsyncTypebox<AgentStatusRouteDeps> = async (
  app,
  { agentStatus, metrics, requestDeadlineMs, idempotencyKeys, isApiKey },
) => {
  // A claim outlives the request's deadline by a margin: only a dead replica's claim runs out.
  const keys = idempotencyHooks(idempotencyKeys, metrics, requestDeadlineMs + 5_000, isApiKey);
  const answered = (answer: string) => metrics.convenienceAnswers.inc({ route: statusChangeRouteLabel, answer });
  // Known answers start at 0, so the first one is an increase that rate() and increase() see.
  for (const answer of ['replayed', 'key_in_use', 'key_reused', 'key_quota', 'precondition_failed', 'accepted']) {
    metrics.convenienceAnswers.inc({ route: statusChangeRouteLabel, answer }, 0);
  }
  app.post(
    partnerRoutes.agentStatus,
    {
      preHandler: keys.claim,
      onSend: keys.settle,
      ...setAgentStatusDocumentation(),
    },
    async (request, reply) => {
      const partner = request.partner!;
      const { agentId, enabled } = request.body;
      request.audit.agentId = agentId;
      request.audit.enabled = enabled;
      // On the monotonic clock, as every local deadline: a wall-clock step moves none of them.
      const arrivedAt = performance.now() - reply.elapsedTime;
      const deadline = arrivedAt + requestDeadlineMs;
      // Prefer is for disables only; `wait` counts from the request's arrival, and a 202 always
      // comes before the deadline's 500 would. The header is passed down unread: the use case asks
      // for it once the disable is recorded, so it is parsed only for an agent of the key's network
      // (docs/interfaces.md §11), and the 404 of another network's agent costs the same with it.
      const preferHeader = enabled ? undefined : request.headers.prefer;
      const respondAsync =
        preferHeader === undefined
          ? undefined
          : () => {
              const prefer = readPrefer(preferHeader);
              if (!prefer.respondAsync) return undefined;
              return { acceptAt: Math.min(arrivedAt + (prefer.waitSeconds ?? 0) * 1000, deadline - acceptBeforeDeadlineMs) };
            };
      const held = keys.held(request);
      let result: ChangeResult;
      try {
        // No statement of the request waits for a database connection past its deadline.
        const value = await waitingUntil(deadline, () =>
          agentStatus.setAgentStatus({
            networkId: partner.networkId,
            agentId,
            enabled,
            partnerName: partner.name,
            requestId: request.id,
            deadline,
            respondAsync,
            conditions: { ifMatch: ifMatchChangeIds(request.headers['if-match']), keyClaim: held },
            ...(held?.changeId ? { madeAs: held.changeId } : {}),
          }),
        );
        result = { value };
      } catch (error) {
        result = { error };
      }
      // Every answer, a success or a failure, is the catalogue's (src/http/answers.ts).
      const answer = answerOf(result, versionOf(request), request.id);
      const { counts } = answer;
      if (counts.change) metrics.agentStatusChanges.inc({ partner: partner.name, enabled: String(enabled), outcome: answer.outcome });
      if (counts.convenience) answered(counts.convenience);
      if (counts.limit) metrics.requestsLimited.inc({ partner: partner.name, limit: counts.limit });
      return sendAnswer(request, reply, answer);
    },
  );
};
