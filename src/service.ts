import type { Logger } from 'pino';
import { createSetAgentStatus } from './agents/set-agent-status.js';
import { buildApp } from './app.js';
import { createKeySource } from './auth/configured-key-source.js';
import { PartnerKeyStore } from './auth/partner-keys.js';
import type { Config } from './config.js';
import { createMetrics, type Metrics } from './observability/metrics.js';
import { createMetricsServer } from './observability/metrics-server.js';
import { createBreaker } from './stores/breaker.js';
import { createRedisCampaignState, type CampaignStateStore } from './stores/campaign-state.js';
import { createAgentRepository, createDatabasePool } from './stores/database.js';
import { createSpendManagementClient, isSpendManagementCallerError } from './stores/spend-management.js';

export interface ServiceOptions {
  logger: Logger;
  /** Replaces the Redis-backed store (npm run dev uses an in-process one). */
  campaignState?: CampaignStateStore;
}

const readinessTimeoutMs = 1_000;

/**
 * Wires the service from its configuration: the one place where stores, breakers, the key source
 * and the app meet. main.ts, npm run dev and the integration tests all start the service through
 * here, so tests exercise the production wiring.
 */
export async function createService(config: Config, options: ServiceOptions) {
  const { logger } = options;
  const metrics = createMetrics();
  const keyStore = new PartnerKeyStore();
  const keySource = createKeySource(config, keyStore, metrics, logger);
  await keySource.start();

  let pool;
  try {
    pool = await createDatabasePool({
      url: config.databaseUrl,
      maxPoolSize: config.databasePoolSize,
      statementTimeoutMs: config.databaseStatementTimeoutMs,
    });
  } catch (error) {
    keySource.stop();
    throw error;
  }
  const agents = createAgentRepository(pool, metrics);

  const spend = createSpendManagementClient({
    baseUrl: config.spendManagementUrl,
    token: config.spendManagementToken,
    timeoutMs: config.spendManagementTimeoutMs,
    metrics,
  });
  const spendBreaker = createBreaker('spend_management', (ids: readonly string[]) => spend.pauseSpendingPeriods(ids), {
    ...config.breaker,
    // got makes at most two attempts of timeoutMs each; the breaker only backs that up.
    timeoutMs: 2 * config.spendManagementTimeoutMs + 500,
    operation: 'pause_spending_periods',
    isCallerError: isSpendManagementCallerError,
  }, metrics);

  const campaignState =
    options.campaignState ??
    createRedisCampaignState({
      url: config.redisUrl,
      keyPrefix: config.redisKeyPrefix,
      commandTimeoutMs: config.redisCommandTimeoutMs,
      metrics,
    });
  const redisBreaker = createBreaker('redis', (ids: readonly string[]) => campaignState.markPaused(ids), {
    ...config.breaker,
    timeoutMs: config.redisCommandTimeoutMs * 2 + 500,
    operation: 'mark_campaigns_paused',
  }, metrics);

  const setAgentStatus = createSetAgentStatus({
    agents,
    pauseSpending: spendBreaker.fire,
    markPausedInStore: redisBreaker.fire,
  });

  let draining = false;
  const app = await buildApp({
    logger,
    metrics,
    keyStore,
    setAgentStatus,
    isReady: async () => {
      const ready = !draining && (await databaseAnswers());
      metrics.ready.set(ready ? 1 : 0);
      return ready;
    },
  });
  const metricsServer = createMetricsServer(metrics);

  async function databaseAnswers(): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), readinessTimeoutMs);
    });
    try {
      return await Promise.race([agents.ping().then(() => true), timeout]);
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  app.addHook('onClose', async () => {
    keySource.stop();
    spendBreaker.breaker.shutdown();
    redisBreaker.breaker.shutdown();
    await Promise.allSettled([pool.end(), campaignState.close(), metricsServer.close()]);
  });

  return {
    app,
    metricsServer,
    metrics,
    keyStore,
    keySource,
    breakers: { spendManagement: spendBreaker.breaker, redis: redisBreaker.breaker },
    /** Readiness turns 503 so endpoints stop routing here; requests are still served. */
    startDraining() {
      draining = true;
      metrics.ready.set(0);
    },
    get draining() {
      return draining;
    },
    /** Stops taking requests, waits for those in flight, then closes every pool. */
    close: () => app.close(),
  };
}

export type Service = Awaited<ReturnType<typeof createService>>;
