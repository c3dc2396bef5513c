// The convergence worker: claims due pending disables and runs them through the runner like a request.
import { isSpanContextValid, type Link, type SpanContext, SpanStatusCode, trace } from '@opentelemetry/api';
import type { Logger } from 'pino';
import type { WorkerSettings } from '../config.js';
import { sqlstateFields } from '../observability/dependency-calls.js';
import type { Metrics } from '../observability/metrics.js';
import type { ClaimedDisable } from '../stores/disable-queue.js';
import type { IdempotencyKeys } from '../stores/idempotency-keys.js';
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
        const end = await runner.run({
          agentId: claim.agentId,
          networkId: claim.networkId,
          partnerName: claim.partnerName,
          claimToken: claim.claimToken,
          stores,
          // A pending row may be there before its flag: a request that met a locked agent row.
          flagged: false,
          stopAt: Number.POSITIVE_INFINITY,
          background: true,
        });
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
 * At most once a minute: deletes the idempotency keys older than 24 hours, a few hundred per
 * statement, so that no statement holds locks on many rows or runs long; at most 20 batches a
 * time, the rest next time.
 */
class ExpiredKeyPurge {
  private lastPurge = 0;

  constructor(private readonly deps: Pick<WorkerDeps, 'expiredKeys' | 'log'>) {}

  async run(stopped: () => boolean): Promise<void> {
    if (Date.now() - this.lastPurge < keyPurgeIntervalMs) return;
    this.lastPurge = Date.now();
    let purged = 0;
    for (let batch = 0; batch < 20 && !stopped(); batch += 1) {
      const n = await this.deps.expiredKeys.purgeExpired(keyPurgeBatch);
      purged += n;
      if (n < keyPurgeBatch) break;
    }
    if (purged > 0) this.deps.log.info({ count: purged }, 'expired idempotency keys deleted');
  }
}

/**
 * The convergence worker of docs/interfaces.md §9, one per replica. Every poll (with jitter, so
 * replicas do not poll in step) it reads the pending-disable figures for the metrics and claims
 * due rows up to its free capacity, with FOR UPDATE SKIP LOCKED and a lease. A claimed row is run
 * by the same pipeline as a request, to the end or to its next failure, which releases it with a
 * capped exponential backoff. A replica that dies leaves its lease to run out: the row is then
 * due again and any replica takes it over.
 */
export function createConvergenceWorker(deps: WorkerDeps) {
  const { stores, runner, settings, metrics, log } = deps;
  const { queue } = stores;
  const running = new Set<Promise<void>>();
  let timer: NodeJS.Timeout | undefined;
  let polling: Promise<void> | undefined;
  let stopped = false;
  const keyPurge = new ExpiredKeyPurge(deps);

  /**
   * Calls per settling round of the call record (each up to 100 campaigns, settled side by side:
   * a spend-management call and a statement each), and rounds per poll at most.
   */
  const recordedClaimSize = 8;
  const recordedRoundsPerPoll = 10;
  let settlingRecorded: Promise<void> | undefined;

  /**
   * Settles the call record's due calls (those whose run could not settle them), claimed a few at
   * a time with a lease; one settling at a time per replica, beside the runs.
   */
  function settleRecorded(): void {
    if (settlingRecorded || stopped) return;
    settlingRecorded = (async () => {
      for (let round = 0; round < recordedRoundsPerPoll && !stopped; round += 1) {
        const claim = await stores.sentPauses.claimDue(deps.owner, settings.leaseMs, recordedClaimSize);
        if (!claim) break;
        const settled = await runner.settleRecorded(claim, stores);
        metrics.unsettledCampaignsSettled.inc(settled);
        if (settled > 0) log.info({ count: settled }, 'unsettled campaigns settled');
      }
    })()
      .catch((error: unknown) => {
        log.warn({ reason: (error as Error).message, ...sqlstateFields(error) }, 'could not settle recorded pause calls; trying again');
      })
      .finally(() => {
        settlingRecorded = undefined;
      });
  }

  async function poll(): Promise<void> {
    try {
      await keyPurge
        .run(() => stopped)
        .catch((error: unknown) => {
          log.warn(
            { reason: (error as Error).message, ...sqlstateFields(error) },
            'could not delete expired idempotency keys; trying again later',
          );
        });
      const stats = await queue.pendingStats();
      metrics.pendingDisables.set(stats.count);
      metrics.pendingDisablesOldestAge.set(stats.oldestAgeSeconds);
      metrics.unsettledCampaigns.set(stats.unsettled.count);
      metrics.unsettledCampaignsOldestAge.set(stats.unsettled.oldestAgeSeconds);
      if (stats.unsettled.count > 0) settleRecorded();
      const free = settings.concurrency - running.size;
      if (stopped || free <= 0 || stats.count === 0) return;
      for (const claim of await queue.claimDue(deps.owner, settings.leaseMs, free)) {
        const run = attempt(claim, deps).catch((error: unknown) => {
          log.error(
            { agentId: claim.agentId, reason: (error as Error).message, ...sqlstateFields(error) },
            'pending disable attempt crashed',
          );
        });
        running.add(run);
        void run.finally(() => running.delete(run));
      }
    } catch (error) {
      log.warn({ reason: (error as Error).message, ...sqlstateFields(error) }, 'convergence worker could not poll; trying again');
    }
  }

  function schedule(): void {
    if (stopped) return;
    const delay = settings.pollIntervalMs * (0.5 + Math.random());
    timer = setTimeout(() => {
      polling = poll().finally(() => {
        polling = undefined;
        schedule();
      });
    }, delay);
  }

  return {
    start(): void {
      stopped = false;
      polling = poll().finally(() => {
        polling = undefined;
        schedule();
      });
    },
    /** Stops claiming; running attempts go on (the runner stops them between batches at shutdown). */
    async stop(): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      await polling;
      await settlingRecorded;
    },
    /** Resolves when the settling of recorded calls under way, if any, has ended (tests). */
    async settled(): Promise<void> {
      await settlingRecorded;
    },
    /** Resolves when every attempt this worker started has ended. */
    async drained(): Promise<void> {
      while (running.size > 0) await Promise.allSettled([...running]);
    },
    /** Runs one poll now (tests). */
    pollNow: poll,
  };
}
