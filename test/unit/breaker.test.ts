import { describe, expect, it } from 'vitest';
import { DependencyError } from '../../src/observability/dependency-calls.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { createBreaker } from '../../src/stores/breaker.js';

const settings = {
  consecutiveFailures: 5,
  errorThresholdPercentage: 50,
  volumeThreshold: 3,
  resetTimeoutMs: 60_000,
  rollingWindowMs: 30_000,
  operation: 'pause_spending_periods',
};

function breakerWith(outcome: { fail: boolean }) {
  let calls = 0;
  const { fire, breaker } = createBreaker(
    'spend_management',
    async () => {
      calls += 1;
      if (outcome.fail) throw new DependencyError('spend_management', 'timeout', 'ETIMEDOUT');
      return 'ok';
    },
    settings,
    createMetrics({ collectDefaults: false }),
  );
  return { fire, breaker, calls: () => calls };
}

describe('the breaker opens on consecutive failures, whatever its window held', () => {
  it('after 300 successes, a hang costs a sequential caller five time-outs, then fails fast', async () => {
    const outcome = { fail: false };
    const { fire, breaker, calls } = breakerWith(outcome);
    for (let i = 0; i < 300; i += 1) await fire();
    outcome.fail = true;
    for (let i = 0; i < 5; i += 1) await expect(fire()).rejects.toMatchObject({ reason: 'timeout' });
    expect(breaker.opened).toBe(true);
    await expect(fire()).rejects.toMatchObject({ reason: 'breaker_open' });
    expect(calls()).toBe(305);
    breaker.shutdown();
  });

  it('a success in between starts the count again', async () => {
    const outcome = { fail: true };
    const { fire, breaker } = breakerWith(outcome);
    for (let i = 0; i < 200; i += 1) {
      outcome.fail = false;
      await fire();
    }
    for (let round = 0; round < 3; round += 1) {
      outcome.fail = true;
      for (let i = 0; i < 4; i += 1) await expect(fire()).rejects.toMatchObject({ reason: 'timeout' });
      outcome.fail = false;
      await fire();
    }
    expect(breaker.opened).toBe(false);
    breaker.shutdown();
  });
});
