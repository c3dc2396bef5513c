import { describe, expect, it } from 'vitest';
import { ConfigError, divideConnections, loadConfig } from '../../src/config.js';

const minimal = {
  DATABASE_URL: 'postgres://u:secret@db:5432/app',
  REDIS_URL: 'redis://cache:6379',
  SPEND_MANAGEMENT_URL: 'http://spend:8080',
  PARTNER_KEYS_FILE: '/etc/partner-keys/partner-keys.json',
};

describe('configuration from the environment', () => {
  it('applies the documented defaults', () => {
    const config = loadConfig(minimal);
    expect(config).toMatchObject({
      port: 8080,
      metricsPort: 9464,
      redisKeyPrefix: '',
      spendManagementToken: undefined,
      logLevel: 'info',
      databaseConnections: { max: 17, request: 10, worker: 2, claimChecks: 4, readiness: 1 },
      databasePooler: 'none',
      spendManagementTimeoutMs: 2000,
      redisCommandTimeoutMs: 1000,
      breaker: { consecutiveFailures: 5, errorThresholdPercentage: 50, volumeThreshold: 3, resetTimeoutMs: 10000, rollingWindowMs: 30000 },
      partnerKeys: { kind: 'file', path: '/etc/partner-keys/partner-keys.json', pollIntervalMs: 5000 },
      drainDelayMs: 5000,
      shutdownTimeoutMs: 20000,
      limits: {
        rateLimitMax: 1200,
        rateLimitWindowMs: 60000,
        disablesInFlightPerNetwork: 8,
        requestDeadlineMs: 25000,
        overloadMaxEventLoopDelayMs: 200,
        overloadUnauthenticatedUtilizationPercent: 50,
        idempotencyKeysPerNetwork: 50000,
      },
      pipeline: { batchesInFlight: 16, spendManagementMaxConcurrency: 16 },
      worker: { pollIntervalMs: 2000, leaseMs: 15000, backoffBaseMs: 1000, backoffMaxMs: 20000, concurrency: 4 },
      secretsManager: { connectTimeoutMs: 2000, requestTimeoutMs: 5000, maxAttempts: 3 },
    });
  });

  it('turns the rate limit off with RATE_LIMIT_MAX=0 and reads the Secrets Manager bounds', () => {
    const config = loadConfig({
      ...minimal,
      RATE_LIMIT_MAX: '0',
      SECRETS_MANAGER_CONNECT_TIMEOUT_MS: '250',
      SECRETS_MANAGER_REQUEST_TIMEOUT_MS: '750',
      SECRETS_MANAGER_MAX_ATTEMPTS: '1',
    });
    expect(config.limits.rateLimitMax).toBe(0);
    expect(loadConfig({ ...minimal, IDEMPOTENCY_KEYS_PER_NETWORK: '25' }).limits.idempotencyKeysPerNetwork).toBe(25);
    expect(() => loadConfig({ ...minimal, IDEMPOTENCY_KEYS_PER_NETWORK: '0' })).toThrow(
      /IDEMPOTENCY_KEYS_PER_NETWORK must be between 1 and/,
    );
    expect(config.secretsManager).toEqual({ connectTimeoutMs: 250, requestTimeoutMs: 750, maxAttempts: 1 });
    expect(() => loadConfig({ ...minimal, SECRETS_MANAGER_MAX_ATTEMPTS: '0' })).toThrow(
      /SECRETS_MANAGER_MAX_ATTEMPTS must be between 1 and 10/,
    );
  });

  for (const name of ['DATABASE_URL', 'REDIS_URL', 'SPEND_MANAGEMENT_URL']) {
    it(`names ${name} when it is missing`, () => {
      const env: Record<string, string> = { ...minimal };
      delete env[name];
      expect(() => loadConfig(env)).toThrow(new ConfigError(`${name} is required`));
    });
  }

  it('refuses a URL of the wrong kind without echoing its value', () => {
    expect(() => loadConfig({ ...minimal, DATABASE_URL: 'mysql://u:secret@db/app' })).toThrow(
      /DATABASE_URL must use postgres:\/\/ or postgresql:\/\//,
    );
    expect(() => loadConfig({ ...minimal, DATABASE_URL: 'not a url with secret' })).toThrow(
      new ConfigError('DATABASE_URL is not a valid URL'),
    );
    expect(() => loadConfig({ ...minimal, REDIS_URL: 'http://u:secret@cache' })).toThrow(
      expect.objectContaining({ message: expect.not.stringContaining('secret') }),
    );
  });

  it('wants exactly one partner-key source', () => {
    const { PARTNER_KEYS_FILE: _file, ...none } = minimal;
    expect(() => loadConfig(none)).toThrow(/PARTNER_KEYS_FILE or PARTNER_KEYS_SECRET_ID is required/);
    expect(() => loadConfig({ ...minimal, PARTNER_KEYS_SECRET_ID: 'partner-keys' })).toThrow(/both set/);
    expect(loadConfig({ ...none, PARTNER_KEYS_SECRET_ID: 'arn:aws:secretsmanager:us-east-1:1:secret:pk' }).partnerKeys).toEqual({
      kind: 'secrets-manager',
      secretId: 'arn:aws:secretsmanager:us-east-1:1:secret:pk',
      refreshIntervalMs: 60000,
    });
  });

  it('rejects numbers that are not whole or out of range, naming the variable', () => {
    expect(() => loadConfig({ ...minimal, PORT: '80a' })).toThrow(/PORT must be a whole number/);
    expect(() => loadConfig({ ...minimal, METRICS_PORT: '70000' })).toThrow(/METRICS_PORT must be between 0 and 65535/);
    expect(() => loadConfig({ ...minimal, DATABASE_POOL_SIZE: '0' })).toThrow(/DATABASE_POOL_SIZE/);
    expect(() => loadConfig({ ...minimal, PARTNER_KEYS_POLL_INTERVAL_MS: '60000' })).toThrow(
      /PARTNER_KEYS_POLL_INTERVAL_MS must be between 100 and 10000/,
    );
  });

  describe('the connection budget (docs/interfaces.md §13)', () => {
    const total = (divided: ReturnType<typeof divideConnections>) =>
      divided.request + divided.worker + divided.claimChecks + divided.readiness;
    /** The pools' sizes: readiness always 1. */
    const shares = (max: number, request: number, worker: number, claimChecks: number) => ({
      max,
      request,
      worker,
      claimChecks,
      readiness: 1,
    });

    it('divides DATABASE_MAX_CONNECTIONS between the four pools, never past it, one connection each at the least', () => {
      expect(loadConfig({ ...minimal, DATABASE_MAX_CONNECTIONS: '8' }).databaseConnections).toEqual(shares(8, 3, 2, 2));
      expect(divideConnections(4)).toEqual(shares(4, 1, 1, 1));
      expect(divideConnections(40)).toEqual(shares(40, 33, 2, 4));
      for (let max = 4; max <= 1_000; max += 1) {
        const divided = divideConnections(max);
        expect(total(divided), `max ${max}`).toBe(max);
        expect(Math.min(divided.request, divided.worker, divided.claimChecks, divided.readiness), `max ${max}`).toBeGreaterThanOrEqual(1);
      }
      expect(() => loadConfig({ ...minimal, DATABASE_MAX_CONNECTIONS: '3' })).toThrow(
        /DATABASE_MAX_CONNECTIONS must be between 4 and 1000/,
      );
    });

    it('keeps DATABASE_POOL_SIZE alone as before (the request pool, the others beside it), and refuses one the budget cannot hold', () => {
      expect(loadConfig({ ...minimal, DATABASE_POOL_SIZE: '25' }).databaseConnections).toEqual(shares(32, 25, 2, 4));
      expect(loadConfig({ ...minimal, DATABASE_POOL_SIZE: '5', DATABASE_MAX_CONNECTIONS: '17' }).databaseConnections).toEqual(
        shares(17, 5, 2, 4),
      );
      expect(() => loadConfig({ ...minimal, DATABASE_POOL_SIZE: '11', DATABASE_MAX_CONNECTIONS: '17' })).toThrow(
        /DATABASE_POOL_SIZE \(11\) must be at most 10: DATABASE_MAX_CONNECTIONS \(17\) leaves that/,
      );
    });
  });

  it('reads DATABASE_POOLER: none or transaction, nothing else', () => {
    expect(loadConfig({ ...minimal, DATABASE_POOLER: 'transaction' }).databasePooler).toBe('transaction');
    expect(loadConfig({ ...minimal, DATABASE_POOLER: 'none' }).databasePooler).toBe('none');
    expect(() => loadConfig({ ...minimal, DATABASE_POOLER: 'session' })).toThrow(
      new ConfigError('DATABASE_POOLER must be one of none, transaction, got "session"'),
    );
  });

  it('rejects an unknown log level', () => {
    expect(() => loadConfig({ ...minimal, LOG_LEVEL: 'loud' })).toThrow(/LOG_LEVEL must be one of/);
  });

  it('refuses a lease no longer than a stuck statement can take (statement timeout + the client margin)', () => {
    expect(() => loadConfig({ ...minimal, WORKER_LEASE_MS: '6000' })).toThrow(
      /WORKER_LEASE_MS \(6000\) must exceed DATABASE_STATEMENT_TIMEOUT_MS \+ 1500 \(6500\)/,
    );
    expect(loadConfig({ ...minimal, WORKER_LEASE_MS: '6000', DATABASE_STATEMENT_TIMEOUT_MS: '4000' }).worker.leaseMs).toBe(6000);
  });
});

describe('partner webhook settings', () => {
  it('defaults to the Standard Webhooks schedule, a 15 s time-out, https only and no allowed ranges', () => {
    expect(loadConfig(minimal).webhooks).toEqual({
      allowHttp: false,
      allowedCidrs: [],
      retryScheduleMs: [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000],
      timeoutMs: 15_000,
      concurrency: 32,
      pollIntervalMs: 1_000,
      allowedPorts: [],
      dnsServers: [],
      dnsTimeoutMs: 1_500,
      dnsLookupsPerNetwork: 4,
      networkMaxPending: 10_000,
      networkMaxInFlight: 8,
      secretsKey: { kind: 'development' },
    });
  });

  it('reads the bounds, the ports, the name servers and the secrets key', () => {
    const { webhooks } = loadConfig({
      ...minimal,
      WEBHOOK_ALLOWED_PORTS: '8443, 9443',
      WEBHOOK_DNS_SERVERS: '127.0.0.1:5353,[::1]:53,10.0.0.2',
      WEBHOOK_NETWORK_MAX_PENDING: '500',
      WEBHOOK_NETWORK_MAX_IN_FLIGHT: '3',
      WEBHOOK_SECRETS_KEY_FILE: '/var/run/secrets/webhooks/key',
    });
    expect(webhooks).toMatchObject({
      allowedPorts: [8443, 9443],
      dnsServers: ['127.0.0.1:5353', '[::1]:53', '10.0.0.2'],
      networkMaxPending: 500,
      networkMaxInFlight: 3,
      secretsKey: { kind: 'file', path: '/var/run/secrets/webhooks/key' },
    });
  });

  it('requires the secrets key in production, and refuses a short one, both forms, bad ports and bad name servers', () => {
    expect(() => loadConfig({ ...minimal, NODE_ENV: 'production' })).toThrow(/WEBHOOK_SECRETS_KEY_FILE .* is required in production/);
    expect(loadConfig({ ...minimal, NODE_ENV: 'production', WEBHOOK_SECRETS_KEY: 'k'.repeat(32) }).webhooks.secretsKey.kind).toBe('value');
    expect(() => loadConfig({ ...minimal, WEBHOOK_SECRETS_KEY: 'short' })).toThrow(/at least 32 characters/);
    expect(() => loadConfig({ ...minimal, WEBHOOK_SECRETS_KEY: 'k'.repeat(32), WEBHOOK_SECRETS_KEY_FILE: '/k' })).toThrow(/both set/);
    for (const ports of ['0', '70000', 'https']) {
      expect(() => loadConfig({ ...minimal, WEBHOOK_ALLOWED_PORTS: ports }), ports).toThrow(/WEBHOOK_ALLOWED_PORTS/);
    }
    for (const servers of ['dns.example', '127.0.0.1:', '1.2.3']) {
      expect(() => loadConfig({ ...minimal, WEBHOOK_DNS_SERVERS: servers }), servers).toThrow(/WEBHOOK_DNS_SERVERS/);
    }
  });

  it('reads a shortened schedule, http and allowed ranges (the test settings)', () => {
    const { webhooks } = loadConfig({
      ...minimal,
      WEBHOOK_RETRY_SCHEDULE: '0.2, 1,2',
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8, ::1/128',
    });
    expect(webhooks).toMatchObject({ allowHttp: true, allowedCidrs: ['127.0.0.0/8', '::1/128'], retryScheduleMs: [200, 1_000, 2_000] });
  });

  it('refuses a malformed schedule or range, naming the variable', () => {
    for (const schedule of ['5,,300', '-5', 'five', '700000']) {
      expect(() => loadConfig({ ...minimal, WEBHOOK_RETRY_SCHEDULE: schedule }), schedule).toThrow(/WEBHOOK_RETRY_SCHEDULE/);
    }
    for (const cidrs of ['127.0.0.1', '10.0.0.0/40', 'localhost/8']) {
      expect(() => loadConfig({ ...minimal, WEBHOOK_ALLOWED_CIDRS: cidrs }), cidrs).toThrow(/WEBHOOK_ALLOWED_CIDRS/);
    }
  });
});
