// One run's claim checks, made inside the spend-management slot right before each call.
import { type Clock, systemClock } from '../clock.js';
import type { Lease } from '../stores/agent-repository.js';
import type { DisableQueue } from '../stores/disable-queue.js';
import type { SentBatch } from '../stores/sent-pauses.js';

/** A claim check's answer. `unknown`: the statement failed, and may have committed its record all the same. */
export interface ClaimAnswer {
  /** The claim is still this run's (held and not expired). */
  ours: boolean;
  /** When the check was sent (monotonic ms). */
  sentAt: number;
  unknown?: true;
}

/**
 * One run's claim checks, made inside the spend-management slot right before its calls. Each check
 * is one statement that tells whether the claim is still the run's (renewing the lease once a third
 * of it is gone) and, only when it is, records the calls it allows in the call record
 * (pause_calls, one row per call). Calls that get their slots while a check is under way wait for the next one,
 * started after they asked, which records them all: every call is covered by a check begun once its
 * slot was granted, and one run never has more than one check in flight. Local durations are
 * measured on the monotonic clock (`clock`: the process's, or a test's).
 */
export class ClaimCheck {
  /** When the lease was last set or renewed (the claiming statement set it just before the run). */
  private renewedAt: number;
  private inFlight: Promise<ClaimAnswer> | undefined;
  /** The batches waiting for the next check, and that check's answer. */
  private next: { batches: SentBatch[]; answer: Promise<ClaimAnswer> } | undefined;

  constructor(
    private readonly queue: Pick<DisableQueue, 'checkClaim'>,
    private readonly agentId: string,
    private readonly lease: Lease,
    private readonly reports: {
      /** The claim is gone: an enable deleted the pending row, or another run took it over. */
      claimLost: () => void;
      failed: (error: unknown) => void;
    },
    private readonly clock: Clock = systemClock,
  ) {
    this.renewedAt = clock.now();
  }

  /** Checks the claim for this batch (in the check under way's successor when one is under way). */
  check(batch: SentBatch): Promise<ClaimAnswer> {
    if (!this.inFlight) return this.start([batch]);
    if (!this.next) {
      const batches: SentBatch[] = [];
      const answer = this.inFlight.then(() => {
        this.next = undefined;
        return this.start(batches);
      });
      this.next = { batches, answer };
    }
    this.next.batches.push(batch);
    return this.next.answer;
  }

  /** Whether a check sent at `at` renews the lease too (a third of it gone): asked by a shared call's check. */
  renewDue(at: number): boolean {
    return at - this.renewedAt > this.lease.leaseMs / 3;
  }

  /**
   * The answer of a shared call's check (src/agents/shared-calls.ts) for this run: the check that
   * covered it was sent at `sentAt`; `renewed` when it renewed the lease.
   */
  sharedAnswer(answer: { ours: boolean; sentAt: number; renewed: boolean } | { failed: unknown }): void {
    if ('failed' in answer) {
      this.reports.failed(answer.failed);
      return;
    }
    if (answer.ours && answer.renewed) this.renewedBy(answer.sentAt);
    if (!answer.ours) this.reports.claimLost();
  }

  /** A statement sent at `sentAt` renewed the lease (a batch's mark, while the claim is the run's). */
  renewedBy(sentAt: number): void {
    this.renewedAt = Math.max(this.renewedAt, sentAt);
  }

  private start(batches: SentBatch[]): Promise<ClaimAnswer> {
    const current: Promise<ClaimAnswer> = this.once(batches).finally(() => {
      if (this.inFlight === current) this.inFlight = undefined;
    });
    this.inFlight = current;
    return current;
  }

  private async once(batches: SentBatch[]): Promise<ClaimAnswer> {
    const sentAt = this.clock.now();
    // A fresh lease is only checked; one a third gone is renewed too.
    const renew = sentAt - this.renewedAt > this.lease.leaseMs / 3;
    try {
      const ours = await this.queue.checkClaim(this.agentId, this.lease, renew, batches);
      if (ours && renew) this.renewedAt = sentAt;
      if (!ours) this.reports.claimLost();
      return { ours, sentAt };
    } catch (error) {
      this.reports.failed(error);
      return { ours: false, sentAt, unknown: true };
    }
  }
}
