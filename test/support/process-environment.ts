import type { SimulatorOptions } from '../../src/spend-simulator/simulator.js';
import { type PartnerKeyRecord, testEnvironment } from './environment.js';

/**
 * What the built service needs to start in a test (startServiceProcess): the test environment
 * (simulator, key file, database and Redis), logging at info, and `env` on top.
 */
export async function processEnvironment(
  partners: PartnerKeyRecord[],
  env: Record<string, string> = {},
  simulatorOptions: SimulatorOptions = {},
) {
  const environment = await testEnvironment(partners, { simulatorOptions });
  return {
    simulator: environment.simulator,
    env: { ...environment.env, LOG_LEVEL: 'info', ...env },
    close: environment.close,
  };
}
