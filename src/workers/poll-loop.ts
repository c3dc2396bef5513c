// The one poll loop every background worker of the service is an instance of: claim what is due
// (with a lease, so a dead replica's claims run out and any replica takes them over), work each
// claim, give back what failed with a backoff, stop on shutdown, and count what it did. pg-boss
// keeps one Worker for every queue the same way; what differs between instances is their claims
// and their work, never the loop.
import type { Logger } from 'pino';
import { type Clock, systemClock, type Timer } from '../clock.js';
import { sqlstateFields } from '../observability/dependency-calls.js';
import type { Metrics } from '../observability/metrics.js';

/** What one instance does: its claims and its work; the loop does the rest. */
export interface PollWork<T> {
  /** The loop's name in logs and metrics (background_loop_*{loop}). */
  readonly name: string;
  /**
   * Claims at most `free` due items for this replica, each under a lease of `leaseMs` (the store's
   * FOR UPDATE SKIP LOCKED and lease): none when nothing is due.
   */
  claim(free: number, leaseMs: number): Promise<readonly T[]>;
  /**
   * Works one claimed item to its end: completed, or given back with a backoff by the work's own
   * statement (a disable run's release, the write-ahead record's). What it throws is a crash.
   */
  work(item: T): Promise<void>;
  /** Gives back an item whose work crashed (none: its lease runs out and any replica takes it over). */
  release?(item: T, error: unknown): Promise<void>;
  /** What the log says of an item (never a key). */
  describe?(item: T): Record<string, unknown>;
}

export interface PollLoopSettings {
  /**
   * How often the loop polls (with jitter, 0.5 to 1.5 times, so replicas do not poll in step);
   * undefined: only when nudged (an instance a housekeeping chore wakes when it sees work).
   */
  pollIntervalMs: number | undefined;
  /** Items worked at once by this replica. */
  concurrency: number;
  leaseMs: number;
  /** A claim that filled the free capacity claims again as soon as capacity frees, at most this many times in a row (1: wait for the next poll). */
  roundsPerPoll?: number;
  /** Longest wait between polls after failed claims (doubling from pollIntervalMs). */
  maxBackoffMs?: number;
  /** Whether stop() waits for the items being worked (default: no, their own stop is the runner's). */
  drainOnStop?: boolean;
  /**
   * Claims again whenever an item's work ends (a slot is free: more of what is due may be taken at
   * once), rather than only while claims come back full (roundsPerPoll). Default: no.
   */
  claimWhenFreed?: boolean;
  /**
   * How long a nudge waits before it polls, so that nudges close together (slots freed together,
   * a relay's batch) make one claim. Default 0: at once. start() and the timed polls never wait.
   */
  nudgeDelayMs?: number;
}

export interface LoopParts {
  log: Logger;
  metrics: Pick<Metrics, 'backgroundLoopClaimed' | 'backgroundLoopFailures'>;
  clock?: Clock;
}

/**
 * One poll loop. start() polls at once, then every pollIntervalMs (jittered) and whenever nudged;
 * a poll claims up to the free capacity and starts the work of each claim beside the others. A
 * claim that fails (the database is down) is logged once per failure and the next poll waits
 * longer, doubling up to maxBackoffMs. stop() claims nothing more and waits for the poll under
 * way (and, with drainOnStop, for the work); stopping twice stops once.
 */
export class PollLoop<T> {
  private readonly running = new Set<Promise<void>>();
  private readonly clock: Clock;
  private timer: Timer | undefined;
  /** A delayed nudge's timer (nudgeDelayMs). */
  private nudged: Timer | undefined;
  private polling: Promise<void> | undefined;
  private stopped = true;
  private failedPolls = 0;
  /** A nudge came while a poll was under way: poll again once it ends. */
  private again = false;
  private rounds = 0;

  constructor(
    private readonly instance: PollWork<T>,
    private readonly settings: PollLoopSettings,
    private readonly parts: LoopParts,
  ) {
    this.clock = parts.clock ?? systemClock;
    parts.metrics.backgroundLoopClaimed.inc({ loop: instance.name }, 0);
    for (const stage of ['claim', 'work']) parts.metrics.backgroundLoopFailures.inc({ loop: instance.name, stage }, 0);
  }

  get name(): string {
    return this.instance.name;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.pollSoon();
  }

  /**
   * Polls now, or after nudgeDelayMs (nudges meanwhile join it), or right after the poll under
   * way: there may be something due. A bound method: it can be handed out as a callback.
   */
  readonly nudge = (): void => {
    if (this.stopped) return;
    const delay = this.settings.nudgeDelayMs ?? 0;
    if (delay <= 0) {
      this.pollSoon();
      return;
    }
    if (this.nudged !== undefined) return;
    this.nudged = this.clock.setTimer(() => {
      this.nudged = undefined;
      this.pollSoon();
    }, delay);
  };

  /** Polls now, or right after the poll under way. */
  private pollSoon(): void {
    if (this.stopped) return;
    if (this.polling) {
      this.again = true;
      return;
    }
    this.clock.clearTimer(this.timer);
    this.timer = undefined;
    this.polling = this.poll().finally(() => {
      this.polling = undefined;
      if (this.again) {
        this.again = false;
        this.pollSoon();
      } else {
        this.schedule();
      }
    });
  }

  /** One poll now, whether started or not (tests and the operator's view): resolves once its claims are taken and their work started. */
  async pollNow(): Promise<void> {
    await this.polling;
    await this.poll();
  }

  /** Resolves when every item this loop started has been worked. */
  async drained(): Promise<void> {
    while (this.running.size > 0) await Promise.allSettled([...this.running]);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.clock.clearTimer(this.timer);
    this.clock.clearTimer(this.nudged);
    this.timer = undefined;
    this.nudged = undefined;
    await this.polling;
    if (this.settings.drainOnStop) await this.drained();
  }

  private schedule(): void {
    const { pollIntervalMs, maxBackoffMs } = this.settings;
    if (this.stopped || pollIntervalMs === undefined) return;
    const backoff = Math.min(pollIntervalMs * 2 ** this.failedPolls, maxBackoffMs ?? pollIntervalMs * 16);
    const delay = Math.max(pollIntervalMs, backoff) * (0.5 + Math.random());
    this.timer = this.clock.setTimer(() => this.pollSoon(), delay);
  }

  private async poll(): Promise<void> {
    const { name } = this.instance;
    const free = this.settings.concurrency - this.running.size;
    if (free <= 0) return;
    let claims: readonly T[];
    try {
      claims = await this.instance.claim(free, this.settings.leaseMs);
      this.failedPolls = 0;
    } catch (error) {
      this.failedPolls += 1;
      this.parts.metrics.backgroundLoopFailures.inc({ loop: name, stage: 'claim' });
      this.parts.log.warn(
        { loop: name, reason: (error as Error).message, ...sqlstateFields(error) },
        'background loop could not claim; trying again',
      );
      return;
    }
    if (claims.length > 0) this.parts.metrics.backgroundLoopClaimed.inc({ loop: name }, claims.length);
    for (const item of claims) this.track(item);
    // Full: there may be more due; claim again as soon as capacity frees, a few rounds in a row.
    this.rounds = claims.length === free ? this.rounds + 1 : 0;
  }

  private track(item: T): void {
    const work = this.instance.work(item).catch((error: unknown) => this.crashed(item, error));
    this.running.add(work);
    void work.finally(() => {
      this.running.delete(work);
      if (this.settings.claimWhenFreed) this.nudge();
      else if (this.rounds > 0 && this.rounds < (this.settings.roundsPerPoll ?? 1)) this.nudge();
      else if (this.running.size === 0) this.rounds = 0;
    });
  }

  private async crashed(item: T, error: unknown): Promise<void> {
    const { name } = this.instance;
    this.parts.metrics.backgroundLoopFailures.inc({ loop: name, stage: 'work' });
    const fields = { loop: name, ...this.instance.describe?.(item), reason: (error as Error).message, ...sqlstateFields(error) };
    this.parts.log.error(fields, 'background work crashed');
    await this.instance.release?.(item, error).catch(() => undefined);
  }
}
