import type { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { Logger } from 'pino';
import type { Config, SecretsManagerSettings } from '../config.js';
import type { Metrics } from '../observability/metrics.js';
import { fileKeySource, type KeySource, secretsManagerKeySource } from './key-sources.js';
import type { PartnerKeyStore } from './partner-keys.js';

/** The key source the configuration names: the mounted file, or Secrets Manager. */
export function createKeySource(config: Config, store: PartnerKeyStore, metrics: Metrics, log: Logger): KeySource {
  const source = config.partnerKeys;
  if (source.kind === 'file') {
    return fileKeySource({ store, metrics, log, path: source.path, pollIntervalMs: source.pollIntervalMs });
  }
  const secret = createSecretReader(source.secretId, config.secretsManager, metrics);
  return secretsManagerKeySource({
    store,
    metrics,
    log,
    refreshIntervalMs: source.refreshIntervalMs,
    fetchSecret: secret.read,
    release: secret.close,
  });
}

/**
 * The longest one GetSecretValue may take, all attempts together: each attempt is bounded by the
 * connection and request time-outs, and the SDK's standard retry waits well under a second between
 * the few attempts allowed here (jittered, 100 ms base).
 */
export function secretReadBoundMs(settings: SecretsManagerSettings): number {
  return settings.maxAttempts * (settings.connectTimeoutMs + settings.requestTimeoutMs) + (settings.maxAttempts - 1) * 1_000;
}

/**
 * One SecretsManagerClient with time-outs of its own: by default the SDK waits for a connection
 * and an answer forever, and a request time-out only logs a warning unless told to throw. Region,
 * credentials and endpoint (AWS_ENDPOINT_URL_SECRETS_MANAGER) come from the SDK's own environment.
 * The client gets no logger: the answer holds every partner key.
 */
function createSecretReader(secretId: string, settings: SecretsManagerSettings, metrics: Metrics) {
  // The SDK is loaded on first use only: in file mode (the chart's default) it would cost start-up
  // time and memory for nothing.
  let sdk:
    | Promise<{ client: SecretsManagerClient; Command: typeof import('@aws-sdk/client-secrets-manager').GetSecretValueCommand }>
    | undefined;
  const loaded = () =>
    (sdk ??= import('@aws-sdk/client-secrets-manager').then(({ SecretsManagerClient: Client, GetSecretValueCommand }) => ({
      client: new Client({
        maxAttempts: settings.maxAttempts,
        requestHandler: {
          connectionTimeout: settings.connectTimeoutMs,
          requestTimeout: settings.requestTimeoutMs,
          throwOnRequestTimeout: true,
        },
      }),
      Command: GetSecretValueCommand,
    })));
  const boundMs = secretReadBoundMs(settings);
  return {
    async read(): Promise<string> {
      const done = metrics.dependencyDuration.startTimer({ dependency: 'secrets_manager', operation: 'get_secret_value' });
      let outcome: 'ok' | 'error' = 'error';
      try {
        const { client, Command } = await loaded();
        const result = await client.send(new Command({ SecretId: secretId }), {
          abortSignal: AbortSignal.timeout(boundMs),
        });
        if (typeof result.SecretString !== 'string') throw new Error('secret has no string value');
        outcome = 'ok';
        return result.SecretString;
      } finally {
        done({ outcome });
      }
    },
    close: () => {
      void sdk?.then(({ client }) => client.destroy());
    },
  };
}
