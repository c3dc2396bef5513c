import { Writable } from 'node:stream';
import { Redis } from 'ioredis';
import { inject } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { createLogger } from '../../src/observability/logger.js';
import { createService, type ServiceOptions } from '../../src/service.js';
import type { SpendSimulator } from '../../src/spend-simulator/simulator.js';
import { type PartnerKeyRecord, testEnvironment } from './environment.js';
import { attachResponseValidator } from './openapi-validator.js';
import { injectStatus } from './partner.js';

/** Captures every log line the service writes, as text and parsed. */
export function logCapture() {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, callback) {
      lines.push(...chunk.toString().split('\n').filter(Boolean));
      callback();
    },
  });
  return { stream, lines, records: () => lines.map((line) => JSON.parse(line) as Record<string, unknown>) };
}

export interface TestServiceOptions {
  partners: PartnerKeyRecord[];
  env?: Record<string, string>;
  simulator?: SpendSimulator;
  redisUrl?: string;
  serviceOptions?: Partial<ServiceOptions>;
}

/**
 * The real service (createService, as main.ts builds it) against the run's PostgreSQL, Redis and
 * an in-process spend-management simulator on a free port. Keys live in a kubelet-style directory.
 */
export async function startTestService(options: TestServiceOptions) {
  const environment = await testEnvironment(options.partners, { simulator: options.simulator });
  const { simulator, simulatorUrl, keysDir, keysFile } = environment;

  const logs = logCapture();
  const config = loadConfig({
    ...environment.env,
    ...(options.redisUrl === undefined ? {} : { REDIS_URL: options.redisUrl }),
    DATABASE_POOL_SIZE: '5',
    // Short enough for the fault tests, long enough for a loaded 2-core CI machine.
    SPEND_MANAGEMENT_TIMEOUT_MS: '1000',
    REDIS_COMMAND_TIMEOUT_MS: '1000',
    ...options.env,
  });
  const service = await createService(config, {
    logger: createLogger('debug', logs.stream),
    ...options.serviceOptions,
  });
  // Every response of every test service is checked against the OpenAPI document; close() fails
  // when one disagreed (test/support/openapi-validator.ts).
  const responseCheck = attachResponseValidator(service.app);
  await service.app.ready();

  const redis = new Redis(inject('redisUrl'), { keyPrefix: inject('redisKeyPrefix') });

  return {
    service,
    app: service.app,
    config,
    simulator,
    /** The simulator's controls (mode, requests seen, paused ids). */
    sim: simulator.simulator,
    simulatorUrl,
    keysDir,
    keysFile,
    logs,
    redis,
    /** A partner's status change, as the partner sends it (in process, through the app). */
    setStatus(apiKey: string, agentId: string, enabled: boolean, headers: Record<string, string> = {}) {
      return injectStatus(service.app, apiKey, agentId, enabled, headers);
    },
    /** Whether the campaign hash in Redis says paused. */
    async pausedInRedis(campaignIds: string[]): Promise<boolean[]> {
      const pipeline = redis.pipeline();
      for (const id of campaignIds) pipeline.hget(`campaign:${id}`, 'paused');
      const results = (await pipeline.exec()) ?? [];
      return results.map(([, value]) => value === '1');
    },
    async close() {
      await service.close();
      await redis.quit();
      await environment.close();
      responseCheck.assertNoViolations();
    },
  };
}

export type TestService = Awaited<ReturnType<typeof startTestService>>;
