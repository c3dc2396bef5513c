import { defineConfig } from 'vitest/config';

// One PostgreSQL database and one Redis key prefix per test run (made in test/global-setup.ts),
// so parallel runs on one machine never collide. Files run in parallel; every test makes its own
// networks, agents and keys, so files never share rows.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    reporters: ['default'],
    env: { OTEL_SDK_DISABLED: 'true' },
  },
});
