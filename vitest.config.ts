import { defineConfig } from 'vitest/config';
import { patience } from './test/support/wait.js';

// Four projects, each with only the set-up it needs:
// - unit: pure logic, no database, no Redis, no build (seconds);
// - chart: the shipped artifacts checked as files (Helm chart, dev-cluster manifests and scripts,
//   alert rules, dashboards, the OpenAPI document, the Dockerfile and the SBOM), again with no
//   database and no build;
// - integration: everything else, i.e. any test that starts the service (in-process or built),
//   against the machine's real PostgreSQL and Redis. Only this project and chaos build dist/ and create the
//   run's database and Redis key prefix (test/global-setup.ts): in vitest 5 a root-level
//   globalSetup would run for `--project unit` too.
// - chaos: the chaos suites, after the others and one file at a time (their own database and build).
// A new test file lands in integration unless it sits under a unit or chart glob, so a test that
// needs the database always gets it. Pool, timeouts and env are shared from the root.
const unit = ['test/unit/**/*.test.ts'];
const chart = [
  'test/chart/**/*.test.ts',
  'test/k8s-dev/**/*.test.ts',
  'test/openapi/**/*.test.ts',
  'test/supply-chain/**/*.test.ts',
  'test/observability/dashboards.test.ts',
  'test/observability/promql.test.ts',
  'test/observability/rules.test.ts',
];

// The chaos suites (three built replicas each, under random faults) run last and one at a time:
// beside another test file on this machine's two cores they measured the machine's overload
// rather than the service (a run with 135 requests in 15 s).
const chaos = ['test/integration/chaos*.process.test.ts'];

export default defineConfig({
  test: {
    pool: 'forks',
    maxWorkers: 2,
    // A test's own time limit is never what it tests: stretched by the load at the start of the run
    // (test/support/wait.ts), so that a busy machine fails no test for being slow (issue 37).
    testTimeout: patience(30_000),
    hookTimeout: patience(60_000),
    reporters: ['default'],
    env: { OTEL_SDK_DISABLED: 'true' },
    projects: [
      { extends: true, test: { name: 'unit', include: unit, sequence: { groupOrder: 0 } } },
      { extends: true, test: { name: 'chart', include: chart, sequence: { groupOrder: 0 } } },
      {
        extends: true,
        test: {
          name: 'integration',
          include: ['test/**/*.test.ts'],
          exclude: [...unit, ...chart, ...chaos],
          globalSetup: ['test/global-setup.ts'],
          setupFiles: ['test/support/file-database.ts'],
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'chaos',
          include: chaos,
          globalSetup: ['test/global-setup.ts'],
          setupFiles: ['test/support/file-database.ts'],
          fileParallelism: false,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
