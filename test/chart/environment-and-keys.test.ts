import type { IExternalSecret } from '@kubernetes-models/external-secrets/external-secrets.io/v1';
import type { IDeployment } from 'kubernetes-models/apps/v1';
import type { IConfigMap, IContainer, IEnvVar, IPodSpec, IServiceAccount } from 'kubernetes-models/v1';
import { describe, expect, it } from 'vitest';
import { ciValuesFiles, findAll, findOne, type RenderOptions, render } from './chart.js';

/** docs/interfaces.md §2, and the project's own tunables with their defaults. */
const contractDefaults: Record<string, string> = {
  PORT: '8080',
  METRICS_PORT: '9464',
  REDIS_KEY_PREFIX: '',
  LOG_LEVEL: 'info',
  DATABASE_MAX_CONNECTIONS: '17',
  DATABASE_STATEMENT_TIMEOUT_MS: '5000',
  DATABASE_POOLER: 'none',
  SPEND_MANAGEMENT_TIMEOUT_MS: '2000',
  REDIS_COMMAND_TIMEOUT_MS: '1000',
  REDIS_CLUSTER: 'false',
  REDIS_WAIT_REPLICAS: 'connected',
  REDIS_WAIT_TIMEOUT_MS: '100',
  REDIS_REPLICATION_CHECK_INTERVAL_MS: '1000',
  REDIS_FAILOVER_REASSERT_WINDOW_MS: '3600000',
  BREAKER_CONSECUTIVE_FAILURES: '5',
  BREAKER_ERROR_THRESHOLD_PERCENT: '50',
  BREAKER_VOLUME_THRESHOLD: '3',
  BREAKER_RESET_TIMEOUT_MS: '10000',
  BREAKER_ROLLING_WINDOW_MS: '30000',
  DRAIN_DELAY_MS: '5000',
  SHUTDOWN_TIMEOUT_MS: '20000',
  RATE_LIMIT_MAX: '1200',
  RATE_LIMIT_WINDOW_MS: '60000',
  DISABLES_IN_FLIGHT_PER_NETWORK: '8',
  REQUEST_DEADLINE_MS: '25000',
  OVERLOAD_MAX_EVENT_LOOP_DELAY_MS: '200',
  OVERLOAD_UNAUTHENTICATED_UTILIZATION_PERCENT: '50',
  IDEMPOTENCY_KEYS_PER_NETWORK: '50000',
  DISABLE_BATCHES_IN_FLIGHT: '16',
  SPEND_MANAGEMENT_MAX_CONCURRENCY: '16',
  SPEND_MANAGEMENT_WORKER_MAX_WAIT_MS: '1000',
  WORKER_POLL_INTERVAL_MS: '2000',
  WORKER_LEASE_MS: '15000',
  WORKER_BACKOFF_BASE_MS: '1000',
  WORKER_BACKOFF_MAX_MS: '20000',
  WORKER_CONCURRENCY: '4',
  CLAIM_CHECK_MAX_AGE_MS: '1000',
  SECRETS_MANAGER_CONNECT_TIMEOUT_MS: '2000',
  SECRETS_MANAGER_REQUEST_TIMEOUT_MS: '5000',
  SECRETS_MANAGER_MAX_ATTEMPTS: '3',
  EVENTS_STREAM: 'PARTNER_AGENT_STATUS',
  EVENTS_SUBJECT_PREFIX: 'partner-agent-status',
  EVENTS_CREATE_STREAM: 'false',
  EVENTS_SOURCE: 'urn:partner-agent-status',
  EVENTS_RETENTION_MS: '86400000',
  WEBHOOK_SECRETS_KEY_FILE: '/var/run/secrets/partner-agent-status/webhooks/webhook-secrets-key',
  WEBHOOK_DNS_TIMEOUT_MS: '1500',
  WEBHOOK_DNS_LOOKUPS_PER_NETWORK: '4',
  WEBHOOK_NETWORK_MAX_PENDING: '10000',
  WEBHOOK_NETWORK_MAX_IN_FLIGHT: '8',
  EVENTS_FEED_RETENTION_DAYS: '30',
  EVENTS_FEED_MAX_STREAMS: '5',
  NODE_OPTIONS: '--max-old-space-size=256 --max-semi-space-size=16 --expose-gc',
  OTEL_METRICS_EXPORTER: 'none',
  OTEL_LOGS_EXPORTER: 'none',
};
const fromSecrets = ['DATABASE_URL', 'REDIS_URL', 'SPEND_MANAGEMENT_TOKEN'];
const alwaysPlain = [...Object.keys(contractDefaults), 'SPEND_MANAGEMENT_URL', 'OTEL_SERVICE_NAME', 'OTEL_SDK_DISABLED'];
const fileMode = ['PARTNER_KEYS_FILE', 'PARTNER_KEYS_POLL_INTERVAL_MS'];
const secretsManagerMode = ['PARTNER_KEYS_SECRET_ID', 'PARTNER_KEYS_REFRESH_INTERVAL_MS', 'AWS_REGION'];
/** Everything the chart may set; anything else is a typo or an undocumented variable. */
const known = new Set([
  ...alwaysPlain,
  ...fromSecrets,
  ...fileMode,
  ...secretsManagerMode,
  'EVENTS_NATS_URL',
  'WEBHOOK_ALLOWED_PORTS',
  'WEBHOOK_DNS_SERVERS',
  'OTEL_EXPORTER_OTLP_ENDPOINT',
  'OTEL_TRACES_SAMPLER',
  'OTEL_TRACES_SAMPLER_ARG',
  'OTEL_RESOURCE_ATTRIBUTES',
  'POD_NAME',
  'POD_NAMESPACE',
  'NODE_NAME',
]);

interface Rendered {
  spec: IPodSpec;
  container: IContainer;
  configMap: Record<string, string>;
  env: IEnvVar[];
  /** Every variable name the container gets, from the ConfigMap and from env. */
  names: string[];
}

function rendered(options: RenderOptions = {}): Rendered {
  const objects = render(options);
  const spec = findOne<IDeployment>(objects, 'Deployment').spec?.template.spec;
  const container = spec?.containers.find((c) => c.name === 'api');
  if (!spec || !container) throw new Error('no api container');
  const configMapName = container.envFrom?.[0]?.configMapRef?.name;
  const configMap = findAll<IConfigMap>(objects, 'ConfigMap').find((c) => c.metadata?.name === configMapName)?.data;
  if (!configMap) throw new Error('no env ConfigMap');
  const env = container.env ?? [];
  return { spec, container, configMap, env, names: [...Object.keys(configMap), ...env.map((e) => e.name)] };
}

function userEnvNames(options: RenderOptions): string[] {
  const extra = new Set(['OTEL_BSP_MAX_QUEUE_SIZE']); // set through extraEnv in ci/everything-values.yaml
  return rendered(options).names.filter((n) => !extra.has(n));
}

describe('environment of the service (docs/interfaces.md §2)', () => {
  it('sets every variable with its documented default', () => {
    const { configMap } = rendered();
    expect(configMap).toMatchObject(contractDefaults);
    expect(configMap.OTEL_SERVICE_NAME).toBe('partner-agent-status');
    expect(configMap.OTEL_SDK_DISABLED).toBe('true');
    expect(configMap.SPEND_MANAGEMENT_URL).toMatch(/^https?:\/\//);
  });

  it.each([['the default values', {}], ...ciValuesFiles.map((f): [string, RenderOptions] => [f, { values: [f] }])])(
    'uses only known variable names, each once, with %s',
    (_name, options: RenderOptions) => {
      const names = userEnvNames(options);
      expect(names.filter((n) => !known.has(n))).toEqual([]);
      expect(new Set(names).size).toBe(names.length);
      for (const name of [...alwaysPlain, 'DATABASE_URL', 'REDIS_URL']) expect(names, name).toContain(name);
    },
  );

  it('takes DATABASE_URL and REDIS_URL from Secrets, never from plain values', () => {
    const { env, configMap } = rendered();
    expect(env.find((e) => e.name === 'DATABASE_URL')?.valueFrom?.secretKeyRef).toEqual({
      name: 'partner-agent-status-database',
      key: 'url',
    });
    expect(env.find((e) => e.name === 'REDIS_URL')?.valueFrom?.secretKeyRef).toEqual({
      name: 'partner-agent-status-redis',
      key: 'url',
    });
    for (const name of fromSecrets) {
      expect(configMap).not.toHaveProperty(name);
      expect(env.find((e) => e.name === name)?.value).toBeUndefined();
    }
  });

  it('sends SPEND_MANAGEMENT_TOKEN from a Secret only when one is named', () => {
    expect(rendered().names).not.toContain('SPEND_MANAGEMENT_TOKEN');
    const { env } = rendered({ values: ['ci/everything-values.yaml'] });
    expect(env.find((e) => e.name === 'SPEND_MANAGEMENT_TOKEN')?.valueFrom?.secretKeyRef).toEqual({
      name: 'pas-spend-management',
      key: 'token',
    });
  });

  it('switches tracing on with an OTLP endpoint, and never exports metrics or logs over OTLP', () => {
    const { configMap, env } = rendered({ values: ['ci/everything-values.yaml'] });
    expect(configMap).toMatchObject({
      OTEL_SDK_DISABLED: 'false',
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://otel-collector.observability.svc:4318',
      OTEL_METRICS_EXPORTER: 'none',
      OTEL_LOGS_EXPORTER: 'none',
    });
    const attributes = env.find((e) => e.name === 'OTEL_RESOURCE_ATTRIBUTES')?.value ?? '';
    expect(attributes).toContain('k8s.pod.name=$(POD_NAME)');
    // $(VAR) expands only from variables defined earlier in the list.
    const position = (name: string): number => env.findIndex((e) => e.name === name);
    expect(position('POD_NAME')).toBeLessThan(position('OTEL_RESOURCE_ATTRIBUTES'));
  });

  it("passes extraEnv through as given, after the chart's own entries", () => {
    const { env } = rendered({ values: ['ci/everything-values.yaml'] });
    expect(env.at(-1)).toEqual({ name: 'OTEL_BSP_MAX_QUEUE_SIZE', value: '1024' });
  });

  it('renders the limits, the deadline, the pipeline, the worker and the Secrets Manager client from config.*', () => {
    expect(rendered({ values: ['ci/everything-values.yaml'] }).configMap).toMatchObject({
      REQUEST_DEADLINE_MS: '28000',
      RATE_LIMIT_MAX: '600',
      RATE_LIMIT_WINDOW_MS: '30000',
      DISABLES_IN_FLIGHT_PER_NETWORK: '4',
      DISABLE_BATCHES_IN_FLIGHT: '8',
      SPEND_MANAGEMENT_MAX_CONCURRENCY: '32',
      WORKER_POLL_INTERVAL_MS: '1000',
      WORKER_CONCURRENCY: '8',
      // Left at their defaults in that file.
      WORKER_LEASE_MS: '15000',
      SECRETS_MANAGER_REQUEST_TIMEOUT_MS: '3000',
      SECRETS_MANAGER_CONNECT_TIMEOUT_MS: '2000',
    });
    expect(rendered({ set: ['config.rateLimit.max=0', 'config.overloadMaxEventLoopDelayMs=500'] }).configMap).toMatchObject({
      RATE_LIMIT_MAX: '0',
      OVERLOAD_MAX_EVENT_LOOP_DELAY_MS: '500',
    });
  });

  it('sets the heap limits in NODE_OPTIONS from nodeOptions, old space and semi-space together, and leaves it out when empty', () => {
    const flags = (options: RenderOptions = {}): string | undefined => rendered(options).configMap.NODE_OPTIONS;
    expect(flags()).toMatch(/--max-old-space-size=\d+/);
    expect(flags()).toMatch(/--max-semi-space-size=\d+/);
    expect(flags({ values: ['ci/everything-values.yaml'] })).toBe('--max-old-space-size=640 --max-semi-space-size=32');
    expect(rendered({ set: ['nodeOptions='] }).names).not.toContain('NODE_OPTIONS');
  });

  it('keeps the default heap well inside the default memory limit', () => {
    const { container, configMap } = rendered();
    const limitMiB = Number(/^(\d+)Mi$/.exec(String(container.resources?.limits?.memory))?.[1]);
    const oldSpace = Number(/--max-old-space-size=(\d+)/.exec(configMap.NODE_OPTIONS ?? '')?.[1]);
    const semiSpace = Number(/--max-semi-space-size=(\d+)/.exec(configMap.NODE_OPTIONS ?? '')?.[1]);
    // The young generation is three semi-spaces; code, buffers and native memory need ~100 MiB more.
    expect(oldSpace + 3 * semiSpace + 100).toBeLessThan(limitMiB);
    expect(semiSpace).toBeGreaterThanOrEqual(16);
  });

  it('samples traces with parentbased_traceidratio at 0.1 by default when tracing is on, and not at all when off', () => {
    expect(rendered().names).not.toContain('OTEL_TRACES_SAMPLER');
    expect(rendered({ set: ['otel.enabled=true'] }).configMap).toMatchObject({
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.1',
    });
    expect(rendered({ values: ['ci/everything-values.yaml'] }).configMap.OTEL_TRACES_SAMPLER_ARG).toBe('0.25');
  });

  it('keeps service links out of the environment', () => {
    expect(rendered().spec.enableServiceLinks).toBe(false);
  });
});

describe('the webhook signing secrets key', () => {
  it('mounts the Secret as a file and points WEBHOOK_SECRETS_KEY_FILE at it; the bounds are plain values', () => {
    const options = {
      set: ['webhooks.secretsKey.existingSecret=hooks-key', 'webhooks.allowedPorts={8443,9443}', 'webhooks.dnsServers={10.0.0.10}'],
    };
    const { spec, container, configMap } = rendered(options);
    const volume = spec.volumes?.find((v) => v.name === 'webhook-secrets-key');
    expect(volume?.secret).toMatchObject({ secretName: 'hooks-key', items: [{ key: 'webhook-secrets-key', path: 'webhook-secrets-key' }] });
    expect(container.volumeMounts).toContainEqual(
      expect.objectContaining({ name: 'webhook-secrets-key', mountPath: '/var/run/secrets/partner-agent-status/webhooks', readOnly: true }),
    );
    expect(configMap).toMatchObject({
      WEBHOOK_SECRETS_KEY_FILE: '/var/run/secrets/partner-agent-status/webhooks/webhook-secrets-key',
      WEBHOOK_ALLOWED_PORTS: '8443,9443',
      WEBHOOK_DNS_SERVERS: '10.0.0.10',
    });
  });
});

describe('partner keys', () => {
  const modes: Array<[string, RenderOptions]> = [
    ['the default values', {}],
    ...ciValuesFiles.map((f): [string, RenderOptions] => [f, { values: [f] }]),
  ];

  it.each(modes)('come from exactly one source with %s', (_name, options) => {
    const { names } = rendered(options);
    const sources = ['PARTNER_KEYS_FILE', 'PARTNER_KEYS_SECRET_ID'].filter((n) => names.includes(n));
    expect(sources).toHaveLength(1);
  });

  describe('from AWS Secrets Manager through an ExternalSecret (the default)', () => {
    it('syncs the whole secret value into one key, partner-keys.json', () => {
      const externalSecret = findOne<IExternalSecret>(render(), 'ExternalSecret');
      expect(externalSecret.apiVersion).toBe('external-secrets.io/v1');
      expect(externalSecret.spec?.secretStoreRef).toEqual({ name: 'aws-secrets-manager', kind: 'ClusterSecretStore' });
      expect(externalSecret.spec?.refreshInterval).toBe('1m');
      expect(externalSecret.spec?.data).toHaveLength(1);
      const entry = externalSecret.spec?.data?.[0];
      expect(entry?.secretKey).toBe('partner-keys.json');
      expect(entry?.remoteRef.key).toBe('partner-agent-status/partner-keys');
      // No property: the whole JSON document, not one field of it.
      expect(entry?.remoteRef.property).toBeUndefined();
      expect(externalSecret.spec?.dataFrom).toBeUndefined();
    });

    it('takes the store, remote key and refresh interval from values', () => {
      const externalSecret = findOne<IExternalSecret>(render({ values: ['ci/everything-values.yaml'] }), 'ExternalSecret');
      expect(externalSecret.spec?.refreshInterval).toBe('30s');
      expect(externalSecret.spec?.data?.[0]?.remoteRef).toMatchObject({
        key: 'prod/partner-agent-status/partner-keys',
        version: 'AWSCURRENT',
      });
      const store = findOne<IExternalSecret>(
        render({
          set: ['partnerKeys.externalSecret.secretStoreRef.kind=SecretStore', 'partnerKeys.externalSecret.secretStoreRef.name=aws'],
        }),
        'ExternalSecret',
      ).spec?.secretStoreRef;
      expect(store).toEqual({ name: 'aws', kind: 'SecretStore' });
    });

    it('mounts the Secret the ExternalSecret writes as a whole directory, so kubelet updates reach the pod', () => {
      const { spec, container, configMap } = rendered();
      const externalSecret = findOne<IExternalSecret>(render(), 'ExternalSecret');
      const mount = container.volumeMounts?.find((m) => m.mountPath === '/etc/partner-keys');
      expect(mount).toBeDefined();
      expect(mount?.readOnly).toBe(true);
      for (const m of container.volumeMounts ?? []) expect(m.subPath, m.name).toBeUndefined();
      const volume = spec.volumes?.find((v) => v.name === mount?.name);
      expect(volume?.secret?.secretName).toBe(externalSecret.spec?.target?.name);
      expect(volume?.secret?.items).toEqual([{ key: 'partner-keys.json', path: 'partner-keys.json' }]);
      expect(volume?.secret?.items?.[0]?.key).toBe(externalSecret.spec?.data?.[0]?.secretKey);
      expect(configMap.PARTNER_KEYS_FILE).toBe('/etc/partner-keys/partner-keys.json');
      expect(configMap.PARTNER_KEYS_POLL_INTERVAL_MS).toBe('5000');
    });

    it('makes the key file readable by the service group only', () => {
      expect(rendered().spec.volumes?.find((v) => v.secret)?.secret?.defaultMode).toBe(0o440);
    });
  });

  describe('from an existing Secret', () => {
    const options = { values: ['ci/existing-secret-values.yaml'] };

    it('creates no ExternalSecret and mounts the named Secret key as partner-keys.json', () => {
      expect(findAll(render(options), 'ExternalSecret')).toEqual([]);
      const { spec, configMap } = rendered(options);
      const volume = spec.volumes?.find((v) => v.secret);
      expect(volume?.secret?.secretName).toBe('partner-keys-managed-elsewhere');
      expect(volume?.secret?.items).toEqual([{ key: 'keys.json', path: 'partner-keys.json' }]);
      expect(configMap.PARTNER_KEYS_FILE).toBe('/etc/partner-keys/partner-keys.json');
    });
  });

  describe('read by the service from AWS Secrets Manager', () => {
    const options = { values: ['ci/secrets-manager-values.yaml'] };

    it('sets PARTNER_KEYS_SECRET_ID and mounts no partner keys (only the webhook secrets key)', () => {
      const { spec, container, configMap, names } = rendered(options);
      expect(findAll(render(options), 'ExternalSecret')).toEqual([]);
      expect(configMap).toMatchObject({
        PARTNER_KEYS_SECRET_ID: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:partner-agent-status/partner-keys-AbCdEf',
        PARTNER_KEYS_REFRESH_INTERVAL_MS: '30000',
        AWS_REGION: 'eu-west-1',
      });
      expect(names).not.toContain('PARTNER_KEYS_FILE');
      expect(spec.volumes?.filter((v) => v.secret).map((v) => v.name)).toEqual(['webhook-secrets-key']);
      expect(container.volumeMounts?.map((m) => m.mountPath)).toEqual(['/tmp', '/var/run/secrets/partner-agent-status/webhooks']);
    });

    it('annotates the ServiceAccount for IRSA', () => {
      const account = findOne<IServiceAccount>(render(options), 'ServiceAccount');
      expect(account.metadata?.annotations?.['eks.amazonaws.com/role-arn']).toBe('arn:aws:iam::123456789012:role/partner-agent-status');
      const deployment = findOne<IDeployment>(render(options), 'Deployment');
      expect(deployment.spec?.template.spec?.serviceAccountName).toBe(account.metadata?.name);
    });
  });
});
