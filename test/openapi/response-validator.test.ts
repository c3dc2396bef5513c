import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { generateOpenApiDocument } from '../../scripts/generate-openapi.js';
import { AgentNotInNetwork, type AgentStatusUseCase } from '../../src/agents/set-agent-status.js';
import { PartnerKeyStore, parseKeySet } from '../../src/auth/partner-keys.js';
import { loadConfig } from '../../src/config.js';
import { buildApp } from '../../src/http/app.js';
import { problem } from '../../src/http/problems.js';
import { DependencyError } from '../../src/observability/dependency-calls.js';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics } from '../../src/observability/metrics.js';
import {
  attachResponseValidator,
  createResponseValidator,
  type ObservedResponse,
  type ResponseValidator,
} from '../support/openapi-validator.js';

const route = '/partner/agents/status';
const agentId = 'us-east-1:00000000-0000-4000-8000-000000000001';
const networkId = '00000000-0000-4000-8000-0000000000aa';
const requestId = 'req-1';

let validator: ResponseValidator;

beforeAll(async () => {
  validator = createResponseValidator(await generateOpenApiDocument());
});

function response(overrides: Partial<ObservedResponse> & { json?: unknown }): ObservedResponse {
  const { json, ...rest } = overrides;
  return {
    method: 'POST',
    route,
    statusCode: 200,
    headers: { 'content-type': 'application/json; charset=utf-8', 'x-request-id': requestId },
    body: JSON.stringify(json ?? { agentId, networkId, enabled: false, pausedCampaignCount: 2 }),
    ...rest,
  };
}

const problemHeaders = { 'content-type': 'application/problem+json; charset=utf-8', 'x-request-id': requestId };

describe('the response validator accepts what the document describes', () => {
  it('accepts a 200 and a problem of each documented status', () => {
    expect(validator.check(response({}))).toEqual({ checked: true, violations: [] });
    for (const kind of [
      'validation',
      'unauthorized',
      'notFound',
      'payloadTooLarge',
      'unsupportedMediaType',
      'dependencyFailure',
      'internal',
    ] as const) {
      const body = problem(kind, 'detail', requestId);
      expect(validator.check(response({ statusCode: body.status, headers: problemHeaders, json: body })).violations, kind).toEqual([]);
    }
  });

  it('skips routes the document leaves out, and checks unmatched requests as problems', () => {
    expect(validator.check(response({ method: 'GET', route: '/livez', json: { status: 'ok' } }))).toEqual({
      checked: false,
      violations: [],
    });
    const notFound = problem('notFound', 'No route for GET /partner/nothing.', requestId);
    expect(
      validator.check(response({ method: 'GET', route: undefined, statusCode: 404, headers: problemHeaders, json: notFound })),
    ).toEqual({ checked: true, violations: [] });
  });
});

describe('the response validator catches what the document does not describe', () => {
  const violations = (r: ObservedResponse) => validator.check(r).violations.join('\n');

  it('a 200 body without pausedCampaignCount', () => {
    expect(violations(response({ json: { agentId, networkId, enabled: false } }))).toMatch(
      /must have required property 'pausedCampaignCount'/,
    );
  });

  it('a 200 body with a negative count or a malformed networkId', () => {
    expect(violations(response({ json: { agentId, networkId, enabled: false, pausedCampaignCount: -1 } }))).toMatch(
      /pausedCampaignCount must be >= 0/,
    );
    expect(violations(response({ json: { agentId, networkId: 'network-a', enabled: false, pausedCampaignCount: 0 } }))).toMatch(
      /networkId must match format "uuid"/,
    );
  });

  it('a problem body with an extra field, or without detail', () => {
    const extra = { ...problem('notFound', 'No agent with this agentId exists in your network.', requestId), agentNetwork: networkId };
    expect(violations(response({ statusCode: 404, headers: problemHeaders, json: extra }))).toMatch(
      /must NOT have additional properties "agentNetwork"/,
    );
    const { detail: _detail, ...bare } = problem('unauthorized', 'x-api-key header is required', requestId);
    expect(violations(response({ statusCode: 401, headers: problemHeaders, json: bare }))).toMatch(/must have required property 'detail'/);
  });

  it('a problem whose status differs from the HTTP status', () => {
    expect(violations(response({ statusCode: 400, headers: problemHeaders, json: problem('notFound', 'x', requestId) }))).toMatch(
      /problem status 404 differs/,
    );
  });

  it('an undocumented status', () => {
    const conflict = { ...problem('validation', 'x', requestId), status: 402 };
    expect(violations(response({ statusCode: 402, headers: problemHeaders, json: conflict }))).toMatch(/status 402 is not documented/);
  });

  it('an undocumented content type: an error as application/json, a 200 as text', () => {
    expect(violations(response({ statusCode: 404, json: problem('notFound', 'x', requestId) }))).toMatch(
      /content type application\/json is not documented/,
    );
    expect(violations(response({ headers: { 'content-type': 'text/plain', 'x-request-id': requestId } }))).toMatch(
      /content type text\/plain is not documented/,
    );
  });

  it('a response without x-request-id, or a body that is not JSON', () => {
    expect(violations(response({ headers: { 'content-type': 'application/json' } }))).toMatch(/required header x-request-id is missing/);
    expect(violations(response({ body: '{"agentId":' }))).toMatch(/body is not JSON/);
  });

  it('an unmatched request answered with something other than a problem', () => {
    expect(violations(response({ method: 'GET', route: undefined, statusCode: 404, json: { error: 'Not Found' } }))).toMatch(
      /content type application\/json is not documented/,
    );
  });
});

describe('attached to the real app, it checks every response as sent', () => {
  const key = 'test-key-0123456789abcdef';
  let closeApp: (() => Promise<unknown>) | undefined;

  afterEach(async () => {
    await closeApp?.();
    closeApp = undefined;
  });

  type SetAgentStatus = AgentStatusUseCase['setAgentStatus'];
  async function appWith(setAgentStatus: SetAgentStatus) {
    const keyStore = new PartnerKeyStore();
    keyStore.replace(parseKeySet(JSON.stringify({ 'partner-keys': { [key]: { networkId, name: 'partner' } } })));
    const app = await buildApp({
      logger: createLogger('silent'),
      metrics: createMetrics({ collectDefaults: false }),
      keyStore,
      agentStatus: {
        setAgentStatus,
        readAgentStatus: async () => {
          throw new AgentNotInNetwork();
        },
        readStatusChanges: async () => {
          throw new AgentNotInNetwork();
        },
      },
      idempotencyKeys: undefined as never,
      webhooks: { endpoints: undefined as never, refusalOfUrl: undefined as never },
      eventFeed: { feed: undefined as never, retentionDays: 30, maxStreamsPerNetwork: 5 },
      isReady: async () => true,
      limits: {
        ...loadConfig({
          DATABASE_URL: 'postgres://x/y',
          REDIS_URL: 'redis://x',
          SPEND_MANAGEMENT_URL: 'http://x',
          PARTNER_KEYS_FILE: '/dev/null',
        }).limits,
        rateLimitMax: 0,
      },
      rateLimitStore: { redis: undefined, keyPrefix: '' },
    });
    const check = attachResponseValidator(app);
    await app.ready();
    closeApp = () => app.close();
    const post = (payload: string, headers: Record<string, string> = { 'x-api-key': key, 'content-type': 'application/json' }) =>
      app.inject({ method: 'POST', url: route, headers, payload });
    return { app, check, post };
  }

  it('finds nothing wrong in every documented answer, without a database', async () => {
    const outcomes: Record<string, () => Promise<unknown>> = {
      [agentId]: async () => ({ agentId, networkId, enabled: false, pausedCampaignCount: 3 }),
      'us-east-1:00000000-0000-4000-8000-000000000404': async () => {
        throw new AgentNotInNetwork();
      },
      'us-east-1:00000000-0000-4000-8000-000000000500': async () => {
        throw new DependencyError('redis', 'timeout', 'command timed out');
      },
      'us-east-1:00000000-0000-4000-8000-000000000501': async () => {
        throw new Error('bug');
      },
    };
    const { app, check, post } = await appWith(((command: { agentId: string }) =>
      outcomes[command.agentId]!()) as unknown as SetAgentStatus);
    const statuses = [];
    for (const id of Object.keys(outcomes)) statuses.push((await post(JSON.stringify({ agentId: id, enabled: false }))).statusCode);
    statuses.push((await post('{"agentId":"x"}')).statusCode);
    statuses.push((await post('{}', { 'content-type': 'application/json' })).statusCode);
    statuses.push((await post(JSON.stringify({ pad: 'x'.repeat(17 * 1024) }))).statusCode);
    statuses.push((await post('agentId=x', { 'x-api-key': key, 'content-type': 'text/plain' })).statusCode);
    statuses.push((await app.inject({ method: 'GET', url: '/partner/openapi.json' })).statusCode);
    statuses.push((await app.inject({ method: 'GET', url: '/partner/nothing' })).statusCode);
    statuses.push((await app.inject({ method: 'GET', url: '/livez' })).statusCode);

    expect(statuses).toEqual([200, 404, 500, 500, 400, 401, 413, 415, 200, 404, 200]);
    expect(check.violations).toEqual([]);
    expect(check.counts).toEqual({ checked: 10, skipped: 1 });
    expect(() => check.assertNoViolations()).not.toThrow();
  });

  it('records a body the serializer let through but the document forbids, and fails the check', async () => {
    const { check, post } = await appWith((async () => ({
      agentId,
      networkId,
      enabled: false,
      pausedCampaignCount: -1,
    })) as unknown as SetAgentStatus);
    expect((await post(JSON.stringify({ agentId, enabled: false }))).statusCode).toBe(200);
    expect(check.violations).toEqual([
      expect.stringMatching(/^POST \/partner\/agents\/status -> 200: body does not match .*pausedCampaignCount must be >= 0/),
    ]);
    expect(() => check.assertNoViolations()).toThrow(/1 response\(s\) disagree with the OpenAPI document/);
  });
});
