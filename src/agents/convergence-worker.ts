// The convergence worker: claims due pending disables and runs them through the runner like a request (an instance of src/workers/).
import { isSpanContextValid, type Link, type SpanContext, SpanStatusCode, trace } from '@opentelemetry/api';
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import type { WorkerSettings } from '../config.js';
import { sqlstateFields } from '../observability/dependency-calls.js';
import type { Metrics } from '../observability/metrics.js';
import type { ClaimedDisable } from '../stores/disable-queue.js';
import type { IdempotencyKeys } from '../stores/idempotency-keys.js';
import { forNetwork } from '../stores/pool-wait.js';
import type { RecordedClaim } from '../stores/sent-pauses.js';
import { type Chore, Housekeeping } from '../workers/housekeeping.js';
import { PollLoop, type PollWork } from '../workers/poll-loop.js';
import { describeCause, type RunStores } from './disable-run.js';
import { type DisableRunner, runOutcome } from './disable-runs.js';

const tracer = trace.getTracer('partner-agent-status');

/**
 * The span of the request that asked for the disable, from its stored W3C traceparent. Parsed
 * here rather than through the global propagator, which (src/telemetry.ts) extracts nothing.
 */
function spanContextOf(traceParent: string): SpanContext | undefined {
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(traceParent);
  if (!match) return undefined;
  const context: SpanContext = { traceId: match[1]!, spanId: match[2]!, traceFlags: Number.parseInt(match[3]!, 16), isRemote: true };
  return isSpanContextValid(context) ? context : undefined;
}

const keyPurgeIntervalMs = 60_000;
const keyPurgeBatch = 500;

interface WorkerDeps {
  stores: RunStores;
  runner: DisableRunner;
  settings: WorkerSettings;
  owner: string;
  metrics: Metrics;
  log: Logger;
  /** Idempotency keys, whose expired rows the worker deletes (docs/interfaces.md §11). */
  expiredKeys: Pick<IdempotencyKeys, 'purgeExpired'>;
}

/** One worker attempt: the claimed row run to its end, in a span linked to the request's, logged and counted. */
function attempt(claim: ClaimedDisable, deps: WorkerDeps): Promise<void> {
  const { stores, runner, metrics, log } = deps;
  const links: Link[] = [];
  const requested = claim.traceParent ? spanContextOf(claim.traceParent) : undefined;
  if (requested) links.push({ context: requested });
  return tracer.startActiveSpan(
    'agent.converge_disable',
    { links, attributes: { 'agent.id': claim.agentId, 'network.id': claim.networkId, 'disable.attempt': claim.attempts } },
    async (span) => {
      try {
        const end = await forNetwork(claim.networkId, () =>
          runner.run({
            agentId: claim.agentId,
            networkId: claim.networkId,
            partnerName: claim.partnerName,
            claimToken: claim.claimToken,
            stores,
            // A pending row may be there before its flag: a request that met a locked agent row.
            flagged: false,
            stopAt: Number.POSITIVE_INFINITY,
            background: true,
          }),
        );
        const outcome = runOutcome(end);
        metrics.workerAttempts.inc({ outcome });
        span.setAttributes({ 'disable.outcome': outcome, 'campaigns.paused_count': end.paused });
        const fields = {
          agentId: claim.agentId,
          networkId: claim.networkId,
          attempt: claim.attempts,
          outcome,
          pausedCampaignCount: end.paused,
          ...(end.kind === 'incomplete' ? { remainingCampaignCount: end.remaining, reason: describeCause(end.cause) } : {}),
          ...(end.kind === 'incomplete' && end.cause.kind === 'dependency' ? sqlstateFields(end.cause.error) : {}),
        };
        if (outcome === 'failed') {
          span.setStatus({ code: SpanStatusCode.ERROR, message: fields.reason ?? 'failed' });
          log.warn(fields, 'pending disable attempt failed; retrying with backoff');
        } else {
          log.info(fields, 'pending disable attempt');
        }
      } finally {
        span.end();
      }
    },
  );
}

/**
 * Deletes the idempotency keys older than 24 hours, a few hundred per statement, so that no
 * statement holds locks on many rows or runs long; at most 20 batches a turn, the rest next turn.
 */
function expiredKeyPurge(deps: Pick<WorkerDeps, 'expiredKeys' | 'log'>): Chore {
  return {
    name: 'expired_idempotency_keys',
    everyMs: keyPurgeIntervalMs,
    async run(stopped) {
      let purged = 0;
      for (let batch = 0; batch < 20 && !stopped(); batch += 1) {
        const n = await deps.expiredKeys.purgeExpired(keyPurgeBatch);
        purged += n;
        if (n < keyPurgeBatch) break;
      }
      if (purged > 0) deps.log.info({ count: purged }, 'expired idempotency keys deleted');
    },
  };
}

/** The queue's figures for the metrics, read every poll; unsettled calls wake the write-ahead settling. */
function queueGauges(deps: Pick<WorkerDeps, 'stores' | 'metrics' | 'settings'>, settling: { nudge(): void }): Chore {
  const { metrics } = deps;
  return {
    name: 'pending_disable_gauges',
    everyMs: deps.settings.pollIntervalMs,
    async run() {
      const stats = await deps.stores.queue.pendingStats();
      metrics.pendingDisables.set(stats.count);
      metrics.pendingDisablesOldestAge.set(stats.oldestAgeSeconds);
      metrics.unsettledCampaigns.set(stats.unsettled.count);
      metrics.unsettledCampaignsOldestAge.set(stats.unsettled.oldestAgeSeconds);
      if (stats.unsettled.count > 0) settling.nudge();
    },
  };
}

/**
 * Calls per settling round of the call record (each up to 100 campaigns, settled side by side:
 * a spend-management call and a statement each), and rounds in a row at most.
 */
const recordedClaimSize = 8;
const recordedRoundsPerPoll = 10;

/**
 * The write-ahead settling, an instance of the poll loop: the call record's due calls (those whose
 * run could not settle them), claimed a few at a time with a lease, one claim at a time per
 * replica beside the runs, woken by the queue's figures when there are any.
 */
function writeAheadSettling(deps: WorkerDeps, clock: Clock | undefined): PollLoop<RecordedClaim> {
  const { stores, runner, metrics, log } = deps;
  const work: PollWork<RecordedClaim> = {
    name: 'write_ahead_settling',
    claim: async (_free, leaseMs) => {
      const claim = await stores.sentPauses.claimDue(deps.owner, leaseMs, recordedClaimSize);
      return claim ? [claim] : [];
    },
    work: async (claim) => {
      try {
        const settled = await runner.settleRecorded(claim, stores);
        metrics.unsettledCampaignsSettled.inc(settled);
        if (settled > 0) log.info({ count: settled }, 'unsettled campaigns settled');
      } catch (error) {
        // A dependency, not a bug: the rows' lease runs out and the next round takes them again.
        log.warn({ reason: (error as Error).message, ...sqlstateFields(error) }, 'could not settle recorded pause calls; trying again');
      }
    },
  };
  const settings = {
    pollIntervalMs: undefined,
    concurrency: 1,
    leaseMs: deps.settings.leaseMs,
    roundsPerPoll: recordedRoundsPerPoll,
    drainOnStop: true,
  };
  return new PollLoop(work, settings, { log, metrics, clock });
}

/**
 * The convergence worker of docs/interfaces.md §9, one per replica, as instances of src/workers/:
 * its poll loop claims due pending disables up to its free capacity (FOR UPDATE SKIP LOCKED and a
 * lease, polled with jitter so replicas do not poll in step) and runs each by the same pipeline as
 * a request, to the end or to its next failure, which releases it with a capped exponential
 * backoff; a replica that dies leaves its lease to run out, and any replica takes the row over.
 * Beside it: the write-ahead settling's loop, and the housekeeping of the queue's figures and of
 * expired idempotency keys. The service starts and stops the three through its resources.
 */
export function createConvergenceWorker(deps: WorkerDeps & { clock?: Clock }) {
  const { stores, settings, metrics, log, clock } = deps;
  const convergence = new PollLoop<ClaimedDisable>(
    {
      name: 'convergence',
      claim: (free, leaseMs) => stores.queue.claimDue(deps.owner, leaseMs, free),
      work: (claim) => attempt(claim, deps),
      describe: (claim) => ({ agentId: claim.agentId, networkId: claim.networkId }),
    },
    { pollIntervalMs: settings.pollIntervalMs, concurrency: settings.concurrency, leaseMs: settings.leaseMs },
    { log, metrics, clock },
  );
  const settling = writeAheadSettling(deps, clock);
  const housekeeping = new Housekeeping([queueGauges(deps, settling), expiredKeyPurge(deps)], { log, metrics, clock });
  return {
    /** The loops, for the service's resources (started in this order, stopped in reverse). */
    loops: [housekeeping, settling, convergence] as const,
    /** Stops claiming; running attempts go on (the runner stops them between batches at shutdown). */
    async stop(): Promise<void> {
      await Promise.all([convergence.stop(), settling.stop(), housekeeping.stop()]);
    },
    /** Resolves when the settling of recorded calls under way, if any, has ended (tests). */
    settled: () => settling.drained(),
    /** Resolves when every attempt this worker started has ended. */
    drained: () => convergence.drained(),
    /** One poll now (tests): the queue's figures, then the claims of due disables. */
    async pollNow(): Promise<void> {
      await housekeeping.runNow(['pending_disable_gauges']);
      await convergence.pollNow();
    },
  };
}
