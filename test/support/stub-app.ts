// The real app (buildApp) with no database or Redis behind it: a use case of the test's choosing,
// the other stores left out. For what is answered before any store is asked (authentication,
// validation, the answer catalogue, the OpenAPI document).
import { AgentNotInNetwork, type AgentStatusUseCase } from '../../src/agents/set-agent-status.js';
import { PartnerKeyStore, parseKeySet } from '../../src/auth/partner-keys.js';
import { loadConfig } from '../../src/config.js';
import { buildApp } from '../../src/http/app.js';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics } from '../../src/observability/metrics.js';

/** The app with one partner holding `key` for `networkId`, its status changes answered by `setAgentStatus`. */
export async function stubApp(options: { key: string; networkId: string; setAgentStatus?: AgentStatusUseCase['setAgentStatus'] }) {
  const keyStore = new PartnerKeyStore();
  keyStore.replace(parseKeySet(JSON.stringify({ 'partner-keys': { [options.key]: { networkId: options.networkId, name: 'partner' } } })));
  const notFound = async (): Promise<never> => {
    throw new AgentNotInNetwork();
  };
  return buildApp({
    logger: createLogger('silent'),
    metrics: createMetrics({ collectDefaults: false }),
    keyStore,
    agentStatus: { setAgentStatus: options.setAgentStatus ?? (notFound as never), readAgentStatus: notFound, readStatusChanges: notFound },
    idempotencyKeys: undefined as never,
    webhooks: { endpoints: undefined as never, refusalOfUrl: undefined as never },
    eventFeed: { feed: undefined as never, retentionDays: 30, maxStreamsPerNetwork: 5 },
    bulk: { changes: undefined as never, batches: undefined as never },
    isReady: async () => true,
    limits: {
      ...loadConfig({
        DATABASE_URL: 'postgres://x/y',
        REDIS_URL: 'redis://x',
        SPEND_MANAGEMENT_URL: 'http://x',
        PARTNER_KEYS_FILE: '/dev/null',
      }).limits,
      rateLimitMax: 0,
      // Load shedding is not what these check: on a busy machine it would answer 503.
      overloadMaxEventLoopDelayMs: 60_000,
      overloadUnauthenticatedUtilizationPercent: 100,
    },
    rateLimitStore: { redis: undefined, keyPrefix: '' },
  });
}
