import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { patience, waitFor } from '../support/wait.js';

describe('waitFor polls until a condition holds', () => {
  it('returns the first value that is neither undefined nor false', async () => {
    let tries = 0;
    const value = await waitFor(() => (++tries < 3 ? undefined : `after ${tries} tries`), {
      timeoutMs: 1_000,
      intervalMs: 1,
      failure: 'never',
    });
    expect(value).toBe('after 3 tries');
  });

  it('fails with the message of the moment once the time is up, after one last try', async () => {
    // vitest's clock: the pauses and the time-out pass when the test moves it, without waiting.
    vi.useFakeTimers();
    onTestFinished(() => {
      vi.useRealTimers();
    });
    let tries = 0;
    const started = Date.now();
    const waiting = waitFor(
      () => {
        tries += 1;
        return false;
      },
      { timeoutMs: 30, intervalMs: 5, failure: () => `still false after ${tries} tries` },
    );
    const failed = expect(waiting).rejects.toThrow(/^still false after \d+ tries$/);
    await vi.advanceTimersByTimeAsync(40);
    await failed;
    expect(Date.now() - started).toBeGreaterThanOrEqual(30);
    expect(tries).toBeGreaterThan(1);
  });

  it('stops at once when the check throws', async () => {
    let tries = 0;
    const failing = waitFor(
      () => {
        tries += 1;
        throw new Error('will not change by waiting');
      },
      { timeoutMs: 10_000, intervalMs: 1, failure: 'timed out' },
    );
    await expect(failing).rejects.toThrow('will not change by waiting');
    expect(tries).toBe(1);
  });
});

describe('patience stretches a deadline that is not the subject by how busy the machine is', () => {
  it('is the figure itself on an idle machine, at most four times it, and TEST_TIME_SCALE when set', () => {
    vi.stubEnv('TEST_TIME_SCALE', '');
    onTestFinished(() => {
      vi.unstubAllEnvs();
    });
    const stretched = patience(1_000);
    expect(stretched).toBeGreaterThanOrEqual(1_000);
    expect(stretched).toBeLessThanOrEqual(4_000);
    vi.stubEnv('TEST_TIME_SCALE', '2.5');
    expect(patience(1_000)).toBe(2_500);
  });
});
