// The optional per-client limit at the Gateway (issue 18, item 6): Envoy Gateway's
// BackendTrafficPolicy on the chart's HTTPRoute, a local rate limit with one bucket per client
// address, validated against the CRD's schema. Under both Helm majors.
import { readFileSync } from 'node:fs';
import type { IHTTPRoute } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1';
import { describe, expect, it } from 'vitest';
import { findAll, findOne, helms, type K8sObject, type RenderOptions, render, renderError, validateObject } from './chart.js';

interface RateLimitRule {
  clientSelectors?: Array<{ sourceCIDR?: { type?: string; value: string }; headers?: unknown[] }>;
  limit: { requests: number; unit: string };
  shadowMode?: boolean;
  xRateLimitHeaders?: string;
}
interface BackendTrafficPolicy extends K8sObject {
  spec: {
    targetRefs: Array<{ group: string; kind: string; name: string }>;
    rateLimit: { type: string; local: { rules: RateLimitRule[] } };
  };
}

const route = ['httpRoute.enabled=true', 'httpRoute.parentRefs[0].name=partner-gateway'];
const limited = { set: [...route, 'httpRoute.clientRateLimit.enabled=true'] };

describe.each(helms)('%s', (_helm, binary) => {
  const as = (options: RenderOptions): RenderOptions => ({ ...options, helm: binary.major });
  const policy = (options: RenderOptions = limited): BackendTrafficPolicy =>
    findOne<BackendTrafficPolicy>(render(as(options)), 'BackendTrafficPolicy');

  describe('BackendTrafficPolicy (Envoy Gateway): a per-client limit at the Gateway', () => {
    it('is off by default, with or without the HTTPRoute', () => {
      expect(findAll(render(as({})), 'BackendTrafficPolicy')).toEqual([]);
      expect(findAll(render(as({ set: route })), 'BackendTrafficPolicy')).toEqual([]);
    });

    it.each([
      ['the least settings', limited],
      ['ci/everything-values.yaml', { values: ['ci/everything-values.yaml'] }],
    ])("matches the schema of Envoy Gateway 1.9's CRD with %s", (_name, options) => {
      validateObject(policy(options));
    });

    it("targets the chart's own HTTPRoute, in its namespace", () => {
      const objects = render(as(limited));
      const httpRoute = findOne<IHTTPRoute>(objects, 'HTTPRoute');
      expect(policy().metadata.namespace).toBe(httpRoute.metadata?.namespace);
      expect(policy().spec.targetRefs).toEqual([{ group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: httpRoute.metadata?.name }]);
    });

    it('is a local limit (no rate-limit service) with one bucket per client IP address, IPv4 and IPv6, 50 a second by default', () => {
      const { rateLimit } = policy().spec;
      expect(rateLimit.type).toBe('Local');
      expect(rateLimit.local.rules).toEqual(
        ['0.0.0.0/0', '::/0'].map((cidr) => ({
          clientSelectors: [{ sourceCIDR: { type: 'Distinct', value: cidr } }],
          limit: { requests: 50, unit: 'Second' },
          xRateLimitHeaders: 'Off',
        })),
      );
    });

    it('never keys on a header: a made-up x-api-key must not buy a fresh bucket, and Envoy must not hold keys', () => {
      for (const rule of policy().spec.rateLimit.local.rules) {
        for (const selector of rule.clientSelectors ?? []) expect(selector.headers).toBeUndefined();
      }
    });

    it('takes the limit, the unit, the address ranges and shadow mode from values', () => {
      const rules = policy({ values: ['ci/everything-values.yaml'] }).spec.rateLimit.local.rules;
      expect(rules.map((rule) => [rule.clientSelectors?.[0]?.sourceCIDR?.value, rule.limit, rule.shadowMode])).toEqual([
        ['0.0.0.0/0', { requests: 30, unit: 'Second' }, true],
        ['::/0', { requests: 30, unit: 'Second' }, true],
      ]);
      const custom = policy({ set: [...limited.set, 'httpRoute.clientRateLimit.requests=600', 'httpRoute.clientRateLimit.unit=Minute'] });
      expect(custom.spec.rateLimit.local.rules[0]?.limit).toEqual({ requests: 600, unit: 'Minute' });
      expect(custom.spec.rateLimit.local.rules[0]?.shadowMode).toBeUndefined();
    });

    it('is refused without the HTTPRoute it would limit', () => {
      expect(renderError(as({ set: ['httpRoute.clientRateLimit.enabled=true'] }))).toMatch(
        /httpRoute.clientRateLimit.enabled needs httpRoute.enabled/,
      );
    });

    it.each([
      ['no requests', 'httpRoute.clientRateLimit.requests=0'],
      ['a unit longer than an hour', 'httpRoute.clientRateLimit.unit=Week'],
      ['an address range that is not a CIDR', 'httpRoute.clientRateLimit.clientCIDRs[0]=partners'],
    ])('refuses %s in values.schema.json', (_name, expression) => {
      expect(renderError(as({ set: [...limited.set, expression] }))).toContain("values don't meet the specifications of the schema(s)");
    });
  });
});

describe("the CRD's CEL rules that concern the rendered policy (Ajv cannot run CEL: each is restated here)", () => {
  const fixture = readFileSync(new URL('./fixtures/envoy-gateway-backendtrafficpolicy.schema.json', import.meta.url), 'utf8');
  const rendered = (): BackendTrafficPolicy =>
    findOne<BackendTrafficPolicy>(render({ values: ['ci/everything-values.yaml'] }), 'BackendTrafficPolicy');
  const routeKinds = ['Gateway', 'ListenerSet', 'HTTPRoute', 'GRPCRoute', 'UDPRoute', 'TCPRoute', 'TLSRoute'];
  const rules: Array<[string, (policy: BackendTrafficPolicy) => boolean]> = [
    ['either targetRef or targetRefs must be used', (policy) => !('targetRef' in policy.spec) && policy.spec.targetRefs.length > 0],
    [
      'this policy can only have a targetRefs[*].group of gateway.networking.k8s.io',
      (policy) => policy.spec.targetRefs.every((ref) => ref.group === 'gateway.networking.k8s.io'),
    ],
    [
      'this policy can only have a targetRefs[*].kind of Gateway/ListenerSet/HTTPRoute/GRPCRoute/TCPRoute/UDPRoute/TLSRoute',
      (policy) => policy.spec.targetRefs.every((ref) => routeKinds.includes(ref.kind)),
    ],
    [
      'at least one of headers, methods, path, sourceCIDR or queryParams must be specified',
      (policy) => policy.spec.rateLimit.local.rules.every((rule) => (rule.clientSelectors ?? []).every((selector) => selector.sourceCIDR)),
    ],
    [
      'response cost is not supported for Local Rate Limits',
      (policy) => policy.spec.rateLimit.local.rules.every((rule) => !('cost' in rule)),
    ],
    [
      'limit fromMetadata is not supported for Local Rate Limits',
      (policy) => policy.spec.rateLimit.local.rules.every((rule) => !('fromMetadata' in rule.limit)),
    ],
  ];

  it.each(rules)('%s', (message, holds) => {
    expect(fixture, 'the rule is no longer in the CRD: drop or update it here').toContain(JSON.stringify(message));
    expect(holds(rendered())).toBe(true);
  });
});

describe("the BackendTrafficPolicy check itself (the CRD's schema)", () => {
  const base = (): BackendTrafficPolicy => structuredClone(findOne<BackendTrafficPolicy>(render(limited), 'BackendTrafficPolicy'));

  it('refuses a misspelt field, which the API server would silently drop', () => {
    const object = base();
    (object.spec.rateLimit.local.rules[0] as unknown as Record<string, unknown>).xRateLimitHeader = 'Off';
    expect(() => validateObject(object)).toThrow(/BackendTrafficPolicy pas-partner-agent-status is invalid: .*additionalProperty/);
  });

  it('refuses a value outside an enum, and a missing limit', () => {
    const wrongType = base();
    wrongType.spec.rateLimit.local.rules[0]!.clientSelectors![0]!.sourceCIDR!.type = 'PerClient';
    expect(() => validateObject(wrongType)).toThrow(/must be equal to one of the allowed values/);
    const noLimit = base();
    delete (noLimit.spec.rateLimit.local.rules[0] as Partial<RateLimitRule>).limit;
    expect(() => validateObject(noLimit)).toThrow(/must have required property 'limit'/);
  });
});
