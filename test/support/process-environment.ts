import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inject } from 'vitest';
import { createSpendSimulator, type SimulatorOptions } from '../../src/spend-simulator/simulator.js';
import { databaseUrl } from './database-url.js';
import { keysDocument, type PartnerKeyRecord } from './service.js';

/**
 * What the built service needs to start in a test (startServiceProcess): a spend simulator on a
 * free port, a key file, and the environment pointing at them and at the file's database and the
 * run's Redis prefix.
 */
export async function processEnvironment(
  partners: PartnerKeyRecord[],
  env: Record<string, string> = {},
  simulatorOptions: SimulatorOptions = {},
) {
  const simulator = createSpendSimulator(simulatorOptions);
  await simulator.listen({ port: 0, host: '127.0.0.1' });
  const keysDir = mkdtempSync(join(tmpdir(), 'pas-process-keys-'));
  writeFileSync(join(keysDir, 'partner-keys.json'), keysDocument(partners));
  return {
    simulator,
    env: {
      DATABASE_URL: databaseUrl(),
      REDIS_URL: inject('redisUrl'),
      REDIS_KEY_PREFIX: inject('redisKeyPrefix'),
      SPEND_MANAGEMENT_URL: `http://127.0.0.1:${(simulator.server.address() as { port: number }).port}`,
      PARTNER_KEYS_FILE: join(keysDir, 'partner-keys.json'),
      LOG_LEVEL: 'info',
      ...env,
    },
    async close() {
      await simulator.close();
      rmSync(keysDir, { recursive: true, force: true });
    },
  };
}
