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
