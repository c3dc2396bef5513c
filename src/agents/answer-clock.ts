// When a request answers: by its deadline, at once at a shutdown, or with a 202 once respond-async allows it.
import { type Clock, systemClock, type Timer } from '../clock.js';

/** The replica's shutdown as a request sees it (DisableRunner.shutdown). */
export interface ShutdownClock {
  /** Monotonic ms by which every run stops starting batches (infinite until a shutdown). */
  readonly stopTime: number;
  /** Aborted when the replica starts shutting down. */
  readonly signal: AbortSignal;
}

/** What a disable request knows while it runs, so that it can answer at any moment. */
export interface DisableProgress {
  paused: number;
  /** Active, unpaused campaigns when the disable was recorded (an estimate of what is left). */
  unpausedAtStart: number | undefined;
  /** Whether agent_approved = false is known to be committed. */
  flagged: boolean;
  /** Called when the statement has answered or the flag is set (Prefer: respond-async). */
  changed?: () => void;
}

/** What is left to pause, estimated from the count the recording statement read. */
export function estimatedRemaining(progress: DisableProgress): number | undefined {
  return progress.unpausedAtStart === undefined ? undefined : Math.max(0, progress.unpausedAtStart - progress.paused);
}

/** Waits until `until`, but never past the request's deadline (both on `clock`). */
export function sleepUntil(until: number, deadline: number, clock: Clock = systemClock): Promise<void> {
  const ms = Math.min(until, deadline) - clock.now();
  return ms > 0 ? clock.sleep(ms) : Promise.resolve();
}

/** How often a disable waiting to answer 202 looks at its progress. */
const acceptPollMs = 100;

/**
 * When a request answers: by its deadline (less a margin to count what is left), at once when the
 * replica starts shutting down, and with a 202 once Prefer: respond-async allows it. All times are
 * monotonic ms on `clock` (the process's, or a test's).
 */
export class AnswerClock {
  constructor(
    private readonly shutdown: ShutdownClock,
    /** How long before its deadline a request stops waiting, to count what is left and answer. */
    private readonly marginMs: number,
    private readonly clock: Clock = systemClock,
  ) {}

  /**
   * The work's result, or why the request must answer without it: its deadline (less the margin)
   * or the replica's stop time came first. The work's own end, once the answer is given, is the
   * run's business (logged by its owner).
   */
  async race(work: Promise<number>, deadline: number): Promise<number | 'deadline' | 'shutdown'> {
    const { signal } = this.shutdown;
    let timer: Timer | undefined;
    let onAbort: (() => void) | undefined;
    const late = new Promise<'deadline' | 'shutdown'>((resolve) => {
      const answerBy = () => {
        this.clock.clearTimer(timer);
        const shutdownFirst = this.shutdown.stopTime < deadline;
        const at = Math.min(deadline, this.shutdown.stopTime) - this.marginMs;
        timer = this.clock.setTimer(() => resolve(shutdownFirst ? 'shutdown' : 'deadline'), Math.max(0, at - this.clock.now()));
      };
      answerBy();
      onAbort = answerBy;
      if (!signal.aborted) signal.addEventListener('abort', onAbort, { once: true });
    });
    work.catch(() => undefined);
    try {
      return await Promise.race([work, late]);
    } finally {
      this.clock.clearTimer(timer);
      if (onAbort) signal.removeEventListener('abort', onAbort);
    }
  }

  /** Whether a request that waits `pollMs` more could no longer answer in time, and why. */
  tooLateToWait(deadline: number, pollMs: number): 'deadline' | 'shutdown' | undefined {
    const { stopTime } = this.shutdown;
    if (Math.min(deadline, stopTime) - this.clock.now() > pollMs + this.marginMs) return undefined;
    return stopTime < deadline ? 'shutdown' : 'deadline';
  }

  /** What is left to pause, from `count` (the database) if it answers quickly, else `estimate`. */
  async remainingWithin(count: () => Promise<number>, estimate: number | undefined): Promise<number | undefined> {
    let timer: Timer | undefined;
    const fallback = new Promise<number | undefined>((resolve) => {
      timer = this.clock.setTimer(() => resolve(estimate), Math.max(50, this.marginMs - 100));
    });
    const counted = count().catch(() => estimate);
    try {
      return await Promise.race([counted, fallback]);
    } finally {
      this.clock.clearTimer(timer);
    }
  }

  /**
   * Resolves once a 202 may be given: the disable is recorded and its flag committed, campaigns
   * were left to pause when it was recorded (otherwise the plain answer comes at once), and the
   * wait the partner asked for is over. Looks at the progress a few times a second. The
   * preference is read once the disable is recorded; without one it never resolves.
   */
  acceptance(preference: () => { acceptAt: number } | undefined, progress: DisableProgress) {
    let timer: Timer | undefined;
    let acceptAt: number | undefined;
    let read = false;
    const promise = new Promise<'accepted'>((resolve) => {
      const look = () => {
        this.clock.clearTimer(timer);
        const recorded = progress.unpausedAtStart !== undefined && progress.flagged;
        if (!recorded) {
          timer = this.clock.setTimer(look, acceptPollMs);
          return;
        }
        if (!read) {
          read = true;
          acceptAt = preference()?.acceptAt;
        }
        if (acceptAt === undefined) return; // no preference after all: the plain answer comes
        if (progress.unpausedAtStart! > 0 && this.clock.now() >= acceptAt) return resolve('accepted');
        timer = this.clock.setTimer(look, Math.max(0, Math.min(acceptPollMs, acceptAt - this.clock.now())));
      };
      progress.changed = look;
      look();
    });
    return {
      promise,
      cancel: () => {
        this.clock.clearTimer(timer);
        progress.changed = undefined;
      },
    };
  }
}
