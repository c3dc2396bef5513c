import { trace, SpanStatusCode } from '@opentelemetry/api';
import type { AgentRepository } from '../stores/database.js';

/** The agent does not exist in the partner's network (whether or not it exists in another one). */
export class AgentNotInNetwork extends Error {
  override readonly name = 'AgentNotInNetwork';
  constructor() {
    super('agent not found in the partner network');
  }
}

export interface SetAgentStatusCommand {
  networkId: string;
  agentId: string;
  enabled: boolean;
}

export interface AgentStatus {
  agentId: string;
  networkId: string;
  enabled: boolean;
  pausedCampaignCount: number;
}

/** The ports the use case needs; the stores implement them, tests may pass failing ones. */
export interface AgentStatusDeps {
  agents: AgentRepository;
  /** Spend management behind its breaker: pauses the spending periods of one batch. */
  pauseSpending: (campaignIds: readonly string[]) => Promise<void>;
  /** The key-value store behind its breaker: marks one batch paused. */
  markPausedInStore: (campaignIds: readonly string[]) => Promise<void>;
  batchSize?: number;
}

/** CONTRACT.md section 6: the spend-management API takes 1 to 100 ids a call. */
export const maxBatchSize = 100;
const tracer = trace.getTracer('partner-agent-status');

/**
 * Enables or disables one agent of the partner's network (specification sections 3 and 4).
 *
 * A disable commits agent_approved = false first, then pauses the agent's active, unpaused
 * campaigns in batches: spend management, then the key-value store, then the database, which is
 * the commit point. So a campaign paused in the database is paused everywhere; a failure leaves
 * the rest unpaused in the database, and repeating the request picks them up again (both remote
 * pauses are idempotent). Batches advance by campaign id, so one call touches each campaign once.
 *
 * Status changes of one agent are serialised within this process, so concurrent disables do not
 * repeat each other's remote calls; across processes the conditional UPDATE still counts each
 * campaign exactly once.
 */
export function createSetAgentStatus(deps: AgentStatusDeps) {
  const batchSize = Math.min(deps.batchSize ?? maxBatchSize, maxBatchSize);
  const inFlight = new Map<string, Promise<unknown>>();

  function serialised<T>(agentId: string, run: () => Promise<T>): Promise<T> {
    const previous = inFlight.get(agentId) ?? Promise.resolve();
    const next = previous.catch(() => undefined).then(run);
    const tail = next.catch(() => undefined);
    inFlight.set(agentId, tail);
    void tail.then(() => {
      if (inFlight.get(agentId) === tail) inFlight.delete(agentId);
    });
    return next;
  }

  async function disable(networkId: string, agentId: string): Promise<number> {
    const agent = await deps.agents.disapprove(networkId, agentId, batchSize);
    if (!agent) throw new AgentNotInNetwork();
    let batch = agent.firstBatch;
    let paused = 0;
    while (batch.length > 0) {
      await deps.pauseSpending(batch);
      await deps.markPausedInStore(batch);
      const result = await deps.agents.markPausedAndFetchNext(agentId, batch, batch.at(-1)!, batchSize);
      paused += result.paused;
      batch = result.next;
    }
    return paused;
  }

  return function setAgentStatus(command: SetAgentStatusCommand): Promise<AgentStatus> {
    const { networkId, agentId, enabled } = command;
    return tracer.startActiveSpan('agent.set_status', async (span) => {
      span.setAttributes({ 'agent.id': agentId, 'network.id': networkId, 'agent.enabled': enabled });
      try {
        const pausedCampaignCount = await serialised(agentId, async () => {
          if (enabled) {
            if (!(await deps.agents.approve(networkId, agentId))) throw new AgentNotInNetwork();
            return 0;
          }
          return disable(networkId, agentId);
        });
        span.setAttribute('campaigns.paused_count', pausedCampaignCount);
        return { agentId, networkId, enabled, pausedCampaignCount };
      } catch (error) {
        if (!(error instanceof AgentNotInNetwork)) {
          span.recordException(error as Error);
          span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error).message });
        }
        throw error;
      } finally {
        span.end();
      }
    });
  };
}

export type SetAgentStatus = ReturnType<typeof createSetAgentStatus>;
