// The clock the protocol's timings read: answer deadlines (AnswerClock), the claim check's age and
// lease renewal (ClaimCheck), a run's stop time, the enable's fence and the workers' leases and
// backoffs. One object passed in, so a test holds time still and moves it by hand instead of
// waiting for it (test/support/clock.ts).
import { performance } from 'node:perf_hooks';

export type Timer = ReturnType<typeof setTimeout>;

export interface Clock {
  /** Monotonic milliseconds: every local deadline and age is measured on this, never on the wall clock. */
  now(): number;
  /** Calls `fn` once `ms` have passed on this clock. */
  setTimer(fn: () => void, ms: number): Timer;
  clearTimer(timer: Timer | undefined): void;
  /** Resolves once `ms` have passed on this clock. */
  sleep(ms: number): Promise<void>;
}

/** The process's clock: performance.now() and the timers of Node. */
export const systemClock: Clock = {
  now: () => performance.now(),
  setTimer: (fn, ms) => setTimeout(fn, ms),
  clearTimer: (timer) => clearTimeout(timer),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};
