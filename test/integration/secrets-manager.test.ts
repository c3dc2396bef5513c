import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { secretReadBoundMs } from '../../src/auth/configured-key-source.js';
import { newApiKey, testDatabase } from '../support/data.js';
import { keysDocument } from '../support/environment.js';
import { fakeAwsEnvironment, fakeSecretsManager } from '../support/fake-secrets-manager.js';
import { startTestService, type TestService } from '../support/service.js';
import { patience } from '../support/wait.js';

/**
 * Partner keys from AWS Secrets Manager, end to end through the real AWS SDK: the service's own
 * wiring (createService → SecretsManagerClient) against a local server speaking the Secrets Manager
 * JSON protocol, pointed to with AWS_ENDPOINT_URL_SECRETS_MANAGER. No SDK mock: signing, retries,
 * time-outs and the protocol are the SDK's.
 */
const secretName = 'partner-agent-status/partner-keys';
const settings = { connectTimeoutMs: 200, requestTimeoutMs: 400, maxAttempts: 2 };
const db = testDatabase();
const fake = fakeSecretsManager(secretName);
let svc: TestService;
let networkId: string;
const firstKey = newApiKey();
const secondKey = newApiKey();

beforeAll(async () => {
  networkId = await db.network();
  fake.setSecret(keysDocument([{ key: firstKey, networkId, name: 'from-secrets-manager' }]));
  const endpoint = await fake.listen();
  // The SDK's own environment: region, credentials (dummy: the local server checks no signature)
  // and the service-specific endpoint override.
  for (const [name, value] of Object.entries(fakeAwsEnvironment(endpoint))) vi.stubEnv(name, value);
  svc = await startTestService({
    partners: [],
    env: {
      PARTNER_KEYS_FILE: '',
      PARTNER_KEYS_SECRET_ID: secretName,
      PARTNER_KEYS_REFRESH_INTERVAL_MS: '1000',
      SECRETS_MANAGER_CONNECT_TIMEOUT_MS: String(settings.connectTimeoutMs),
      SECRETS_MANAGER_REQUEST_TIMEOUT_MS: String(settings.requestTimeoutMs),
      SECRETS_MANAGER_MAX_ATTEMPTS: String(settings.maxAttempts),
    },
  });
});

afterAll(async () => {
  await svc?.close();
  await fake.close();
  await db.close();
  vi.unstubAllEnvs();
});

const enable = async (apiKey: string) => {
  const agentId = await db.agent(networkId);
  return (await svc.setStatus(apiKey, agentId, true)).statusCode;
};

const metric = async (series: string) => {
  const text = await svc.service.metrics.registry.metrics();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
};
const failedGauge = 'partner_keys_last_load_failed{source="secrets_manager"}';

describe('partner keys from AWS Secrets Manager through the real SDK', () => {
  it('loads the secret at start with one signed GetSecretValue in the JSON protocol', async () => {
    expect(fake.calls[0]).toEqual({
      target: 'secretsmanager.GetSecretValue',
      contentType: 'application/x-amz-json-1.1',
      body: { SecretId: secretName },
      signed: true,
    });
    expect(await enable(firstKey)).toBe(200);
    expect(await enable(secondKey)).toBe(401);
    expect(await metric(failedGauge)).toBe(0);
    expect(await metric('partner_keys_reloads_total{source="secrets_manager",outcome="success"}')).toBe(1);
  });

  it('picks up a changed secret on the refresh interval, with no restart', async () => {
    fake.setSecret(keysDocument([{ key: secondKey, networkId, name: 'rotated' }]));
    await vi.waitFor(() => expect(svc.service.keyStore.lookup(secondKey)?.name).toBe('rotated'), { timeout: 10_000, interval: 100 });
    expect(await enable(secondKey)).toBe(200);
    expect(await enable(firstKey)).toBe(401);
  });

  it('keeps the last good keys when a refresh gets a 500, retrying up to the configured attempts', async () => {
    fake.setMode('fail');
    try {
      const before = fake.calls.length;
      await svc.service.keySource.reload();
      expect(fake.calls.length - before).toBe(settings.maxAttempts);
      expect(await metric(failedGauge)).toBe(1);
      expect(await enable(secondKey)).toBe(200);
      const warning = svc.logs.records().findLast((r) => r.msg === 'partner keys could not be read; serving the last good key set');
      expect(warning).toMatchObject({ source: 'secrets_manager', reason: 'InternalServiceError' });
    } finally {
      fake.setMode('ok');
    }
    // A good read clears the failure.
    await svc.service.keySource.reload();
    expect(await metric(failedGauge)).toBe(0);
  });

  it('gives up on a hung endpoint within the configured bound and keeps the last good keys', async () => {
    fake.setMode('hang');
    try {
      const before = fake.calls.length;
      const started = performance.now();
      await svc.service.keySource.reload();
      const elapsed = performance.now() - started;
      // Each attempt ends at the request time-out (not the SDK's default of waiting forever).
      expect(elapsed).toBeGreaterThanOrEqual(settings.maxAttempts * settings.requestTimeoutMs - 50);
      // The bound itself is what is tested; only the margin for timers that fire late stretches with
      // the machine's load (beside a second suite it once took longer than the bound plus 1 s).
      expect(elapsed).toBeLessThan(secretReadBoundMs(settings) + patience(1_000));
      expect(fake.calls.length - before).toBe(settings.maxAttempts);
      expect(await metric(failedGauge)).toBe(1);
      expect(await enable(secondKey)).toBe(200);
      expect(svc.logs.records().findLast((r) => r.msg === 'partner keys could not be read; serving the last good key set')).toMatchObject({
        source: 'secrets_manager',
        reason: 'ETIMEDOUT',
      });
    } finally {
      fake.setMode('ok');
    }
    expect(
      await metric('dependency_request_duration_seconds_count{dependency="secrets_manager",operation="get_secret_value",outcome="error"}'),
    ).toBe(2);
  });

  it('never writes a key or the secret to the log or the metrics', async () => {
    const everything = svc.logs.lines.join('\n');
    expect(svc.logs.lines.length).toBeGreaterThan(5);
    const metrics = await svc.service.metrics.registry.metrics();
    for (const key of [firstKey, secondKey]) {
      expect(everything).not.toContain(key);
      expect(metrics).not.toContain(key);
    }
    expect(everything).not.toContain('partner-keys"');
  });
});
