// A clock a test holds: the protocol's timings (src/clock.ts) read vitest's fake time, so a test
// moves time with vi.advanceTimersByTimeAsync instead of waiting for it.
import { vi } from 'vitest';
import type { Clock } from '../../src/clock.js';

/**
 * Turns vitest's fake timers on for Date, setTimeout and clearTimeout (setImmediate and the
 * microtasks stay real) and returns the clock that reads them. Call vi.useRealTimers() after the test.
 */
export function fakeClock(): Clock {
  vi.useFakeTimers({ toFake: ['Date', 'setTimeout', 'clearTimeout'] });
  return {
    now: () => Date.now(),
    setTimer: (fn, ms) => setTimeout(fn, ms),
    clearTimer: (timer) => clearTimeout(timer),
    sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
  };
}
