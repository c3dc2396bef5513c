// The disable protocol, composed once: breakers, spend-management slots, the claim check inside the slot, runner, use case and worker.
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import type { BreakerSettings, Config, PipelineSettings, WorkerSettings } from '../config.js';
import type { Metrics } from '../observability/metrics.js';
import type { AgentBatchStatements } from '../stores/agent-batches.js';
import { createBreaker } from '../stores/breaker.js';
import type { CampaignStateStore } from '../stores/campaign-state.js';
import type { IdempotencyKeys } from '../stores/idempotency-keys.js';
import type { SpendManagementClient } from '../stores/spend-management.js';
import { ActiveNetworks } from './active-networks.js';
import { BulkRecorder } from './bulk-recorder.js';
import { createConvergenceWorker } from './convergence-worker.js';
import type { PausePorts, RunStores } from './disable-run.js';
import { DisableRunner, maxBatchSize } from './disable-runs.js';
import { createAgentStatusUseCase } from './set-agent-status.js';
import { createBulkStatusUseCase } from './set-agents-status.js';
import { batchCallsInFlight, SharedCalls } from './shared-calls.js';
import { SpendScheduler } from './spend-scheduler.js';

/** How the protocol runs: from the configuration (protocolSettings), or set by a test. */
export interface ProtocolSettings {
  breaker: BreakerSettings;
  pipeline: PipelineSettings;
  worker: WorkerSettings;
  disablesInFlightPerNetwork: number;
  /** The longest one batch can take (spend-management and Redis time-outs plus the database's). */
  batchBudgetMs: number;
  /** How often a run looks again at an agent row another transaction holds. */
  flagRetryMs: number;
  /** How often a request that waits for another replica's run looks again (the use case's default when unset). */
  waitPollMs?: number;
  /** How long before its deadline a request stops waiting, to count what is left and answer (the use case's default when unset). */
  answerMarginMs?: number;
  /** Bulk changes (docs/interfaces.md §16): a batch's recording statements at once, and how long a shared call waits for more campaigns. */
  bulk?: { statementsInFlight: number; callLingerMs: number };
}

/**
 * Calls of one network waiting for a spend-management slot, at most: far above what its runs can
 * queue (DISABLES_IN_FLIGHT_PER_NETWORK runs of DISABLE_BATCHES_IN_FLIGHT batches each, with the
 * defaults 8 × 16), so it only stops a run-away.
 */
const maxQueuedCallsPerNetwork = 4_096;

export function protocolSettings(config: Config): ProtocolSettings {
  return {
    breaker: config.breaker,
    pipeline: config.pipeline,
    worker: config.worker,
    disablesInFlightPerNetwork: config.limits.disablesInFlightPerNetwork,
    batchBudgetMs: config.spendManagementTimeoutMs + config.redisCommandTimeoutMs + config.databaseStatementTimeoutMs,
    flagRetryMs: 200,
    bulk: config.bulk,
  };
}

export interface ProtocolDeps {
  settings: ProtocolSettings;
  /** This replica, as recorded in pending_disables.lease_owner. */
  owner: string;
  /** Requests' statements (their claim checks on a pool of their own) and the worker's. */
  stores: RunStores;
  /** The statements of bulk changes that serve many agents at once (the requests' pool). */
  agentBatches: AgentBatchStatements;
  workerStores: RunStores;
  /** The two stores that pause campaigns outside the database, as they are; each is put behind its breaker here. */
  spendManagement: Pick<SpendManagementClient, 'pauseSpendingPeriods'>;
  campaignState: Pick<CampaignStateStore, 'markPaused'>;
  /** Idempotency keys, whose expired rows the worker deletes. */
  expiredKeys: Pick<IdempotencyKeys, 'purgeExpired'>;
  metrics: Metrics;
  log: Logger;
  /** The protocol's timings (deadlines, claim-check ages, leases, the enable's fence); the process's clock by default. */
  clock?: Clock;
}

/**
 * The disable protocol, composed once: the breakers in front of spend management and the campaign
 * state, the replica's spend-management slots (shared fairly between networks; the worker's calls
 * take what requests leave free), the claim checked inside the slot right before each call, the
 * runner every run passes (DisableRunner.run, the one place a run's end is reported), the use case
 * requests call, and the convergence worker. service.ts builds the service's protocol here, and the
 * protocol's unit test builds its own the same way.
 */
export function createDisableProtocol(deps: ProtocolDeps) {
  const { settings, metrics } = deps;
  const spendBreaker = createBreaker(
    'spend_management',
    (campaignIds: readonly string[], callKey: string) => deps.spendManagement.pauseSpendingPeriods(campaignIds, callKey),
    { ...settings.breaker, operation: 'pause_spending_periods' },
    metrics,
  );
  const stateBreaker = createBreaker(
    'redis',
    (campaignIds: readonly string[]) => deps.campaignState.markPaused(campaignIds),
    { ...settings.breaker, operation: 'mark_campaigns_paused' },
    metrics,
  );
  // One bound on spend-management calls in flight for the whole replica, requests and worker.
  const slots = new SpendScheduler(
    settings.pipeline.spendManagementMaxConcurrency,
    maxQueuedCallsPerNetwork,
    settings.pipeline.workerCallMaxWaitMs,
  );
  const ports: PausePorts = {
    // The run asks for a slot and checks its claim inside it: a batch that waited for capacity
    // while an enable answered, or while another replica took the disable over, is never sent.
    // An open breaker is seen before the check: a call that would not be sent is not recorded.
    async spendSlot(owner) {
      const slot = await slots.acquire(owner);
      const refused = spendBreaker.refusal();
      if (refused) {
        slot.release();
        throw refused;
      }
      return { pause: (batch) => spendBreaker.fire(batch.campaignIds, batch.callKey), release: () => slot.release() };
    },
    markPausedInStore: (ids) => stateBreaker.fire(ids),
  };
  const { worker: workerSettings } = settings;
  const runner = new DisableRunner(
    ports,
    {
      batchSize: maxBatchSize,
      batchesInFlight: settings.pipeline.batchesInFlight,
      leaseMs: workerSettings.leaseMs,
      backoff: { baseMs: workerSettings.backoffBaseMs, maxMs: workerSettings.backoffMaxMs },
      batchBudgetMs: settings.batchBudgetMs,
      flagRetryMs: settings.flagRetryMs,
      claimCheckMaxAgeMs: workerSettings.claimCheckMaxAgeMs,
      owner: deps.owner,
    },
    metrics,
    deps.clock,
  );
  const activeNetworks = new ActiveNetworks();
  const useCase = createAgentStatusUseCase({
    activeNetworks,
    agents: deps.stores.agents,
    queue: deps.stores.queue,
    sentPauses: deps.stores.sentPauses,
    runs: runner,
    disablesInFlightPerNetwork: settings.disablesInFlightPerNetwork,
    // No call starts on a claim check older than this: an enable that superseded a run waits as long.
    supersedeFenceMs: workerSettings.claimCheckMaxAgeMs,
    waitPollMs: settings.waitPollMs,
    answerMarginMs: settings.answerMarginMs,
  });
  const bulkSettings = settings.bulk ?? { statementsInFlight: 4, callLingerMs: 500 };
  const newSharedCalls = (networkId: string) =>
    new SharedCalls(
      {
        inSlot: (owner, task) => slots.run(owner, task),
        pauseSpending: (ids, key) => spendBreaker.fire(ids, key),
        markPausedInStore: (ids) => stateBreaker.fire(ids),
        checkSharedClaims: (parts, sentKey) => deps.stores.queue.checkSharedClaims(parts, sentKey),
        breakerOpen: () => spendBreaker.breaker.opened,
        clock: runner.clock,
        claimCheckMaxAgeMs: workerSettings.claimCheckMaxAgeMs,
        lingerMs: bulkSettings.callLingerMs,
        callsInFlight: () => batchCallsInFlight(settings.pipeline.spendManagementMaxConcurrency, activeNetworks.othersThan(networkId)),
      },
      // One lane of the network's turns for the whole batch: its calls take the network's share.
      { networkId, agentId: `batch:${randomUUID()}`, background: false },
    );
  const { agents } = deps.stores;
  const bulk = createBulkStatusUseCase({
    agentStatus: useCase,
    newSharedCalls,
    newSharedMarks: (networkId) => runner.sharedMarks(networkId, deps.agentBatches, agents),
    newRecorder: (networkId, author) =>
      new BulkRecorder({ batches: deps.agentBatches, agents, networkId, author, statementsInFlight: bulkSettings.statementsInFlight }),
  });
  const worker = createConvergenceWorker({
    stores: deps.workerStores,
    runner,
    settings: workerSettings,
    owner: deps.owner,
    metrics,
    log: deps.log,
    expiredKeys: deps.expiredKeys,
    clock: deps.clock,
  });
  return { runner, useCase, bulk, worker, breakers: { spendManagement: spendBreaker.breaker, redis: stateBreaker.breaker } };
}
