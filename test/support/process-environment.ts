import type { SimulatorOptions } from '../../src/spend-simulator/simulator.js';
import { type PartnerKeyRecord, testEnvironment } from './environment.js';
import { startServiceProcess } from './process.js';
import { waitFor } from './wait.js';

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

/**
 * The built service for a test of its own behaviour, with `env` on top of the run's environment:
 * no load shedding (a busy test machine must not turn the requests under test into 503s), no drain
 * and no telemetry. Resolves once it answers a partner's status read of `probeAgentId` with 200.
 */
export async function startServingProcess(partner: PartnerKeyRecord, probeAgentId: string, env: Record<string, string>) {
  const environment = await processEnvironment([partner], {
    OTEL_SDK_DISABLED: 'true',
    DRAIN_DELAY_MS: '0',
    OVERLOAD_MAX_EVENT_LOOP_DELAY_MS: '60000',
    ...env,
  });
  const service = await startServiceProcess(environment.env);
  try {
    await waitFor(
      async () => {
        const response = await fetch(`${service.baseUrl}/partner/agents/${probeAgentId}/status`, { headers: { 'x-api-key': partner.key } });
        await response.arrayBuffer();
        return response.status === 200;
      },
      { timeoutMs: 20_000, intervalMs: 200, failure: 'the service did not answer a status read with 200' },
    );
  } catch (error) {
    await service.stop();
    await environment.close();
    throw error;
  }
  return { environment, service };
}
