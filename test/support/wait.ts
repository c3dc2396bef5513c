import { availableParallelism, loadavg } from 'node:os';

export interface WaitOptions {
  /** How long to keep trying; one try always runs, and one more once the time is up. */
  timeoutMs: number;
  /** The pause between tries. */
  intervalMs: number;
  /** The error's message when the time is up; a function is called then, to show the latest state. */
  failure: string | (() => string);
}

/**
 * Polls until `check` gives a value (anything but `undefined` or `false`) and returns it: for
 * conditions that something outside the test makes true (a process becoming ready, a log line, a
 * span arriving), never a fixed sleep. Throws once `timeoutMs` has passed; `check` may itself throw
 * to stop at once on an answer that waiting will not change.
 */
export async function waitFor<T>(check: () => T | false | undefined | Promise<T | false | undefined>, options: WaitOptions): Promise<T> {
  const deadline = Date.now() + options.timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(typeof options.failure === 'string' ? options.failure : options.failure());
    // The global timer, so that a test on vitest's fake clock drives the pauses.
    await new Promise((resolve) => setTimeout(resolve, options.intervalMs));
  }
}

/**
 * A deadline for a wait whose length is not what the test is about (a process starting, a call
 * reaching a simulator), stretched by how busy the machine is: `ms` on an idle machine, up to four
 * times that when the load average over the last minute is four times the cores or more (a
 * shared CI runner, a laptop building beside the tests). TEST_TIME_SCALE, when set, is used instead.
 * A test whose subject is a time (a deadline, a lease, a timeout) keeps its figures as they are.
 */
export function patience(ms: number): number {
  const set = Number(process.env.TEST_TIME_SCALE);
  if (Number.isFinite(set) && set > 0) return Math.round(ms * set);
  const busy = loadavg()[0]! / Math.max(1, availableParallelism());
  return Math.round(ms * Math.min(4, Math.max(1, busy)));
}

/**
 * `work`, or an error naming what is still under way once `ms` have passed: for a step of a long
 * test that must not hang it silently until the test's own time-out (which names nothing). The
 * work itself goes on; the caller's clean-up stops it.
 */
export async function within<T>(work: Promise<T>, ms: number, what: () => string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what()} after ${Math.round(ms / 1_000)} s`)), ms);
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}
