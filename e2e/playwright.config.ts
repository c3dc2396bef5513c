import { defineConfig } from '@playwright/test';
import { prepareLocalRun } from './support/local-run.js';

/**
 * The Playwright suite (docs/qa.md): the API specs (`specs/`, the `request` fixture only, no
 * browser) and the browser specs (`browser/`: the partner reference page in Debian's chromium,
 * which `.ci/run` installs; Playwright's own browser download is never used).
 *
 * - BASE_URL set: the suite runs against that service (the kind cluster's ingress:
 *   k8s-dev/run-e2e.sh), seeding through the E2E_* variables.
 * - BASE_URL unset: webServer starts a local stack first (e2e/local-stack.ts: build, a fresh
 *   database on the machine's PostgreSQL, its own Redis key prefix, the simulator, the service
 *   started the production way), waits for /readyz, and stops it with SIGTERM at the end.
 */
const remoteBaseUrl = process.env.BASE_URL?.trim() || undefined;
const local = remoteBaseUrl ? undefined : await prepareLocalRun();
const baseURL = remoteBaseUrl ?? local!.baseUrl;

export default defineConfig({
  testDir: './specs',
  outputDir: '../test-results/e2e',
  timeout: 30_000,
  expect: { timeout: 5_000 },
  forbidOnly: !!process.env.CI,
  retries: 0,
  // Every test makes its own agents and campaigns, and every worker its own partners: the
  // `api` specs run in parallel. Two workers suit a 2-core machine.
  fullyParallel: true,
  workers: Number(process.env.E2E_WORKERS || 2),
  reporter: [['list'], ['html', { outputFolder: '../playwright-report', open: 'never' }]],
  use: {
    baseURL,
    // Failed tests keep a trace of their API calls (requests, responses) in the HTML report.
    trace: 'retain-on-failure',
  },
  projects: [
    { name: 'api', testIgnore: /\.serial\.spec\.ts$/ },
    {
      // The spend-management simulator's mode is global: a spec that switches it to `fail` would
      // break the disables of tests running beside it. These specs run after `api` has finished,
      // one at a time (and are skipped, reported as "did not run", when an `api` test failed).
      name: 'shared-simulator',
      testMatch: /\.serial\.spec\.ts$/,
      dependencies: ['api'],
      fullyParallel: false,
      // One file at a time too: two such files side by side would switch each other's mode.
      workers: 1,
    },
    {
      name: 'browser',
      testDir: './browser',
      use: {
        browserName: 'chromium',
        launchOptions: {
          executablePath: process.env.E2E_CHROMIUM_PATH?.trim() || '/usr/bin/chromium',
          // No sandbox (CI runs as root, in a container); nothing the browser does on its own
          // (updates, field trials, safe browsing) may reach the network during a test.
          args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update'],
        },
      },
    },
  ],
  webServer: local && {
    // process.execPath: the Node 24 that runs Playwright (npm puts the project's node first).
    // tsx as a loader in that one process, not `npx tsx` (npm, then tsx's parent relaying signals
    // to its child): Playwright signals the whole process group, and one process receiving one
    // SIGTERM keeps the shutdown order (service, simulator, database) in the launcher's hands.
    command: `"${process.execPath}" --import tsx e2e/local-stack.ts`,
    cwd: '..',
    url: `${local.baseUrl}/readyz`,
    // A build, a database and two processes: well under a minute on 2 cores.
    timeout: 120_000,
    reuseExistingServer: false,
    stdout: 'pipe',
    stderr: 'pipe',
    gracefulShutdown: { signal: 'SIGTERM', timeout: 30_000 },
  },
});
