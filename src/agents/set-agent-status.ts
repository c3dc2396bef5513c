import { randomUUID } from 'node:crypto';
import { context, propagation, SpanStatusCode, trace } from '@opentelemetry/api';
import type { AgentRepository, AgentStatusView } from '../stores/database.js';
import type { DisableRunner, RunCause } from './disable-runs.js';

/** The agent does not exist in the partner's network (whether or not it exists in another one). */
export class AgentNotInNetwork extends Error {
  override readonly name = 'AgentNotInNetwork';
  constructor() {
    super('agent not found in the partner network');
  }
}

/** The network already has its allowance of disables running in this replica (CONTRACT.md section 10). */
export class TooManyDisables extends Error {
  override readonly name = 'TooManyDisables';
  constructor(readonly limit: number) {
    super(`at most ${limit} agents of one network are disabled at once`);
  }
}

/** The agent is disabled, but not every campaign is paused yet; the service goes on by itself. */
export class DisableIncomplete extends Error {
  override readonly name = 'DisableIncomplete';
  constructor(
    readonly pausedCampaignCount: number,
    readonly remainingCampaignCount: number | undefined,
    readonly runCause: RunCause,
  ) {
    super(`disable incomplete: ${runCause.kind}`);
  }
}

/** An enable answered after this disable was requested: its pausing stopped (CONTRACT.md section 9). */
export class DisableSuperseded extends Error {
  override readonly name = 'DisableSuperseded';
  constructor(readonly pausedCampaignCount: number) {
    super('disable superseded by a later enable');
  }
}

export interface SetAgentStatusCommand {
  networkId: string;
  agentId: string;
  enabled: boolean;
  /** The key's label and the response's x-request-id, for the audit trail. */
  partnerName: string;
  requestId: string | undefined;
  /** Epoch ms by which the request must be answered. */
  deadline: number;
}

export interface AgentStatus {
  agentId: string;
  networkId: string;
  enabled: boolean;
  pausedCampaignCount: number;
}

export interface AgentStatusDeps {
  agents: AgentRepository;
  runner: DisableRunner;
  disablesInFlightPerNetwork: number;
  batchSize: number;
  /** How often a request that waits for another replica's run looks again. */
  waitPollMs?: number;
}

const tracer = trace.getTracer('partner-agent-status');

/**
 * Enables or disables one agent of the partner's network (specification sections 3 and 4;
 * CONTRACT.md sections 7, 9 and 10).
 *
 * Nothing here waits on anything before the statement that checks the network: a request of
 * another network never joins, waits for or counts against this network's runs, so neither its
 * latency nor its 404 tells anything about agents elsewhere.
 */
export function createAgentStatusUseCase(deps: AgentStatusDeps) {
  const { agents, runner } = deps;
  const waitPollMs = deps.waitPollMs ?? 200;
  /** networkId → agentId → requests of that agent holding the network's allowance. */
  const disabling = new Map<string, Map<string, number>>();

  function reserve(networkId: string, agentId: string): () => void {
    const local = runner.active(agentId);
    if (local && local.networkId === networkId) return () => undefined; // joins a run: does not count
    let agentsOfNetwork = disabling.get(networkId);
    const holders = agentsOfNetwork?.get(agentId) ?? 0;
    if (holders === 0 && (agentsOfNetwork?.size ?? 0) >= deps.disablesInFlightPerNetwork) {
      throw new TooManyDisables(deps.disablesInFlightPerNetwork);
    }
    if (!agentsOfNetwork) {
      agentsOfNetwork = new Map();
      disabling.set(networkId, agentsOfNetwork);
    }
    const held = agentsOfNetwork;
    held.set(agentId, holders + 1);
    return () => {
      const left = (held.get(agentId) ?? 1) - 1;
      if (left > 0) held.set(agentId, left);
      else held.delete(agentId);
      if (held.size === 0 && disabling.get(networkId) === held) disabling.delete(networkId);
    };
  }

  function currentTraceParent(): string | null {
    const carrier: Record<string, string> = {};
    propagation.inject(context.active(), carrier);
    return carrier.traceparent ?? null;
  }

  async function disable(command: SetAgentStatusCommand): Promise<number> {
    const { networkId, agentId, deadline } = command;
    const release = reserve(networkId, agentId);
    try {
      const claimToken = randomUUID();
      const outcome = await agents.disable(
        networkId,
        agentId,
        { partnerName: command.partnerName, requestId: command.requestId },
        { ...runner.lease(claimToken), traceParent: currentTraceParent() },
        // One more than a batch: the run then knows whether the first batch is the last.
        deps.batchSize + 1,
      );
      if (!outcome) throw new AgentNotInNetwork();
      let paused = 0;
      if (outcome.claimed) {
        const end = await runner.run({ agentId, networkId, claimToken, agents, firstBatch: outcome.firstBatch, stopAt: deadline });
        if (end.kind === 'completed') return end.paused;
        if (end.kind === 'incomplete') throw new DisableIncomplete(end.paused, end.remaining, end.cause);
        paused = end.paused;
      }
      return await waitForOtherRuns(command, outcome.changeId, paused);
    } finally {
      release();
    }
  }

  /**
   * Another run holds the claim (a repeated request, the worker, or another replica). Join it when
   * it runs here; otherwise look again until the pending row is gone (finished, or superseded by
   * an enable) or free to take over (its holder died or gave up), within the request's deadline.
   */
  async function waitForOtherRuns(command: SetAgentStatusCommand, changeId: string, pausedSoFar: number): Promise<number> {
    const { networkId, agentId, deadline } = command;
    let paused = pausedSoFar;
    for (;;) {
      if (await agents.enabledSince(agentId, changeId)) throw new DisableSuperseded(paused);
      const local = runner.active(agentId);
      if (local && local.networkId === networkId) {
        const end = await local.done;
        if (end.kind === 'completed') return paused;
        if (end.kind === 'incomplete') throw new DisableIncomplete(paused, end.remaining, end.cause);
        continue;
      }
      const claimToken = randomUUID();
      const state = await agents.takeOver(agentId, runner.lease(claimToken));
      if (state.claimed) {
        const end = await runner.run({ agentId, networkId, claimToken, agents, stopAt: deadline });
        if (end.kind === 'completed') return paused + end.paused;
        if (end.kind === 'incomplete') throw new DisableIncomplete(paused + end.paused, end.remaining, end.cause);
        paused += end.paused;
        continue;
      }
      if (!state.pending) {
        if (await agents.enabledSince(agentId, changeId)) throw new DisableSuperseded(paused);
        return paused;
      }
      const left = deadline - Date.now();
      if (left <= waitPollMs) {
        throw new DisableIncomplete(paused, await agents.remainingCampaigns(agentId).catch(() => undefined), { kind: 'deadline' });
      }
      await new Promise((resolve) => setTimeout(resolve, waitPollMs));
    }
  }

  function setAgentStatus(command: SetAgentStatusCommand): Promise<AgentStatus> {
    const { networkId, agentId, enabled } = command;
    return tracer.startActiveSpan('agent.set_status', async (span) => {
      span.setAttributes({ 'agent.id': agentId, 'network.id': networkId, 'agent.enabled': enabled });
      try {
        let pausedCampaignCount = 0;
        if (enabled) {
          if (!(await agents.enable(networkId, agentId, { partnerName: command.partnerName, requestId: command.requestId }))) {
            throw new AgentNotInNetwork();
          }
        } else {
          pausedCampaignCount = await disable(command);
        }
        span.setAttribute('campaigns.paused_count', pausedCampaignCount);
        return { agentId, networkId, enabled, pausedCampaignCount };
      } catch (error) {
        if (error instanceof DisableIncomplete || error instanceof DisableSuperseded) {
          span.setAttribute('campaigns.paused_count', error.pausedCampaignCount);
        }
        if (!(error instanceof AgentNotInNetwork || error instanceof TooManyDisables)) {
          span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error).message });
        }
        throw error;
      } finally {
        span.end();
      }
    });
  }

  async function readAgentStatus(networkId: string, agentId: string): Promise<AgentStatusView> {
    const status = await agents.readStatus(networkId, agentId);
    if (!status) throw new AgentNotInNetwork();
    return status;
  }

  return { setAgentStatus, readAgentStatus };
}

export type AgentStatusUseCase = ReturnType<typeof createAgentStatusUseCase>;
