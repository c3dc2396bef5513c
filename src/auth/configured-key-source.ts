import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { Logger } from 'pino';
import type { Config } from '../config.js';
import type { Metrics } from '../observability/metrics.js';
import { fileKeySource, secretsManagerKeySource, type KeySource } from './key-sources.js';
import type { PartnerKeyStore } from './partner-keys.js';

/** The key source the configuration names: the mounted file, or Secrets Manager. */
export function createKeySource(config: Config, store: PartnerKeyStore, metrics: Metrics, log: Logger): KeySource {
  const source = config.partnerKeys;
  if (source.kind === 'file') {
    return fileKeySource({ store, metrics, log, path: source.path, pollIntervalMs: source.pollIntervalMs });
  }
  const client = new SecretsManagerClient({});
  return secretsManagerKeySource({
    store,
    metrics,
    log,
    refreshIntervalMs: source.refreshIntervalMs,
    fetchSecret: async () => {
      const started = performance.now();
      let outcome: 'ok' | 'error' = 'error';
      try {
        const result = await client.send(new GetSecretValueCommand({ SecretId: source.secretId }));
        if (typeof result.SecretString !== 'string') throw new Error('secret has no string value');
        outcome = 'ok';
        return result.SecretString;
      } finally {
        metrics.dependencyDuration.observe(
          { dependency: 'secrets_manager', operation: 'get_secret_value', outcome },
          (performance.now() - started) / 1000,
        );
      }
    },
  });
}
