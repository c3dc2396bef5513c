import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inject } from 'vitest';
import { createSpendSimulator, type SimulatorOptions, type SpendSimulator } from '../../src/spend-simulator/simulator.js';
import { databaseUrl } from './database-url.js';

export interface PartnerKeyRecord {
  key: string;
  networkId: string;
  name: string;
  /** The API version the key is pinned to (docs/interfaces.md §15). */
  apiVersion?: string;
}

export function keysDocument(partners: PartnerKeyRecord[]): string {
  return JSON.stringify({
    'partner-keys': Object.fromEntries(
      partners.map((p) => [p.key, { networkId: p.networkId, name: p.name, ...(p.apiVersion ? { apiVersion: p.apiVersion } : {}) }]),
    ),
  });
}

export interface TestEnvironmentOptions {
  /** A simulator already listening (shared by two services); the environment starts its own otherwise. */
  simulator?: SpendSimulator;
  /** The options of the simulator the environment starts. */
  simulatorOptions?: SimulatorOptions;
}

/**
 * What any start of the service in a test needs, in process (startTestService) or as the built
 * program (startServiceProcess): a spend-management simulator on a free port, the partner keys in
 * a kubelet-style directory, and the environment pointing at them, at the file's database and at
 * the run's Redis and key prefix.
 */
export async function testEnvironment(partners: PartnerKeyRecord[], options: TestEnvironmentOptions = {}) {
  const simulator = options.simulator ?? createSpendSimulator(options.simulatorOptions);
  const ownSimulator = !options.simulator;
  if (ownSimulator) await simulator.listen({ port: 0, host: '127.0.0.1' });
  const simulatorUrl = `http://127.0.0.1:${(simulator.server.address() as { port: number }).port}`;

  const keysDir = mkdtempSync(join(tmpdir(), 'pas-keys-'));
  const keysFile = join(keysDir, 'partner-keys.json');
  writeFileSync(keysFile, keysDocument(partners));

  return {
    simulator,
    simulatorUrl,
    keysDir,
    keysFile,
    env: {
      DATABASE_URL: databaseUrl(),
      REDIS_URL: inject('redisUrl'),
      REDIS_KEY_PREFIX: inject('redisKeyPrefix'),
      SPEND_MANAGEMENT_URL: simulatorUrl,
      PARTNER_KEYS_FILE: keysFile,
      // Load shedding answers 503 when the event loop lags: on a busy machine (a shared CI runner,
      // a second npm test beside this one) a test's own requests made it shed and fail (issue 37).
      // No test relies on the defaults; the shedding tests set the thresholds they are about.
      OVERLOAD_MAX_EVENT_LOOP_DELAY_MS: '60000',
      OVERLOAD_UNAUTHENTICATED_UTILIZATION_PERCENT: '100',
      // PostgreSQL's 100 connections are the machine's, shared with anything else running there:
      // two `npm test` side by side (four test files, some with three replicas) took 104 at 17 a
      // replica, and services failed to start with "too many clients" (issue 37). A test replica
      // needs no more than 10 (requests 5, worker 2, claim checks 2, readiness 1); the tests of
      // the budget itself set their own.
      DATABASE_MAX_CONNECTIONS: '10',
    } as Record<string, string>,
    /** Stops the simulator it started (not one it was given) and removes the key directory. */
    async close() {
      if (ownSimulator) await simulator.close();
      rmSync(keysDir, { recursive: true, force: true });
    },
  };
}
