import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import { load } from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { chartDir, helms, lint, type RenderOptions, render, renderError } from './chart.js';

interface SchemaNode {
  type?: string | string[];
  properties?: Record<string, SchemaNode>;
  additionalProperties?: boolean | SchemaNode;
  items?: SchemaNode;
  $ref?: string;
  allOf?: SchemaNode[];
  oneOf?: SchemaNode[];
  definitions?: Record<string, SchemaNode>;
  description?: string;
}

const schema = JSON.parse(readFileSync(join(chartDir, 'values.schema.json'), 'utf8')) as SchemaNode;
const defaults = load(readFileSync(join(chartDir, 'values.yaml'), 'utf8')) as Record<string, unknown>;

/** Follows $ref and single-entry allOf wrappers to the schema node that describes a value. */
function resolve(node: SchemaNode): SchemaNode {
  if (node.$ref) {
    const name = node.$ref.replace('#/definitions/', '');
    const target = schema.definitions?.[name];
    if (!target) throw new Error(`dangling $ref ${node.$ref}`);
    return resolve(target);
  }
  if (node.allOf?.length === 1 && node.allOf[0]) return resolve(node.allOf[0]);
  return node;
}

/** Paths of values.yaml that the schema does not describe. */
function undescribed(value: unknown, node: SchemaNode, path: string): string[] {
  const resolved = resolve(node);
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return [];
  const missing: string[] = [];
  for (const [key, child] of Object.entries(value)) {
    const childPath = path ? `${path}.${key}` : key;
    const described = resolved.properties?.[key];
    if (described) missing.push(...undescribed(child, described, childPath));
    else if (typeof resolved.additionalProperties === 'object')
      missing.push(...undescribed(child, resolved.additionalProperties, childPath));
    // Free-form Kubernetes objects (security contexts, affinity) are open; everything else is closed.
    else if (resolved.additionalProperties === false || resolved.type !== 'object') missing.push(childPath);
  }
  return missing;
}

describe('values.schema.json', () => {
  it('describes every value of values.yaml', () => {
    expect(undescribed(defaults, schema, '')).toEqual([]);
  });

  it('describes every top-level value and rejects unknown top-level keys', () => {
    expect(schema.additionalProperties).toBe(false);
    for (const key of Object.keys(defaults)) {
      expect(resolve(schema.properties?.[key] ?? {}).type, key).toBeDefined();
      expect(schema.properties?.[key]?.description, `${key} has no description`).toBeTruthy();
    }
  });

  it('rejects unknown keys in the nested objects of the chart too', () => {
    const closed = Object.entries(schema.properties ?? {})
      .map(([key, node]) => [key, resolve(node)] as const)
      .filter(([, node]) => node.properties !== undefined);
    expect(closed.length).toBeGreaterThan(20);
    for (const [key, node] of closed) expect(node.additionalProperties, key).toBe(false);
  });
});

/** Ajv over the chart's own schema: says *why* a value set is invalid, whatever Helm prints. */
const ajv = new Ajv({ allErrors: true, strict: false });
const validateValues = ajv.compile(schema as object);

function deepMerge(base: unknown, override: unknown): unknown {
  if (typeof base !== 'object' || base === null || Array.isArray(base)) return override;
  if (typeof override !== 'object' || override === null || Array.isArray(override)) return override;
  const merged: Record<string, unknown> = { ...(base as Record<string, unknown>) };
  for (const [key, value] of Object.entries(override)) merged[key] = deepMerge(merged[key], value);
  return merged;
}

interface Rejection {
  /** What the case sets, in Helm's words. */
  options: RenderOptions;
  /** The same change as a values object, for Ajv. */
  override: Record<string, unknown>;
  /** Where the error is: the path of the value (for additionalProperties, of its parent). */
  path: string[];
  keyword: 'type' | 'additionalProperties' | 'minimum' | 'maximum' | 'enum' | 'pattern';
  /** The unknown property, for additionalProperties. */
  property?: string;
}

const rejections: Array<[string, Rejection]> = [
  [
    'a string replica count (--set replicaCount=two)',
    { options: { set: ['replicaCount=two'] }, override: { replicaCount: 'two' }, path: ['replicaCount'], keyword: 'type' },
  ],
  [
    'a quoted number as replica count',
    { options: { setString: ['replicaCount=3'] }, override: { replicaCount: '3' }, path: ['replicaCount'], keyword: 'type' },
  ],
  [
    'an unknown top-level key',
    { options: { set: ['replicas=3'] }, override: { replicas: 3 }, path: [], keyword: 'additionalProperties', property: 'replicas' },
  ],
  [
    'an API version deprecation without its link',
    {
      options: { setJson: ['config.apiVersionDeprecations={"2026-11-21":{"deprecatedAt":"2027-01-01T00:00:00Z","until":"x"}}'] },
      override: { config: { apiVersionDeprecations: { '2026-11-21': { deprecatedAt: '2027-01-01T00:00:00Z', until: 'x' } } } },
      path: ['config', 'apiVersionDeprecations', '2026-11-21'],
      keyword: 'additionalProperties',
      property: 'until',
    },
  ],
  [
    'an unknown nested key, such as an attempt to move a probe path',
    {
      options: { set: ['probes.liveness.path=/healthz'] },
      override: { probes: { liveness: { path: '/healthz' } } },
      path: ['probes', 'liveness'],
      keyword: 'additionalProperties',
      property: 'path',
    },
  ],
  [
    'a port the non-root service cannot bind',
    { options: { set: ['ports.http=80'] }, override: { ports: { http: 80 } }, path: ['ports', 'http'], keyword: 'minimum' },
  ],
  [
    'a string port',
    {
      options: { setString: ['ports.metrics=9464'] },
      override: { ports: { metrics: '9464' } },
      path: ['ports', 'metrics'],
      keyword: 'type',
    },
  ],
  [
    'an unknown partner-keys mode',
    {
      options: { set: ['partnerKeys.mode=vault'] },
      override: { partnerKeys: { mode: 'vault' } },
      path: ['partnerKeys', 'mode'],
      keyword: 'enum',
    },
  ],
  [
    'an unknown log level',
    {
      options: { set: ['config.logLevel=verbose'] },
      override: { config: { logLevel: 'verbose' } },
      path: ['config', 'logLevel'],
      keyword: 'enum',
    },
  ],
  [
    'a key poll slower than 10 s (the service would refuse it at start)',
    {
      options: { set: ['partnerKeys.pollIntervalMs=20000'] },
      override: { partnerKeys: { pollIntervalMs: 20000 } },
      path: ['partnerKeys', 'pollIntervalMs'],
      keyword: 'maximum',
    },
  ],
  [
    'fewer connections per pod than its four pools need',
    {
      options: { set: ['database.maxConnections=3'] },
      override: { database: { maxConnections: 3 } },
      path: ['database', 'maxConnections'],
      keyword: 'minimum',
    },
  ],
  [
    'a shutdown time-out under a second',
    {
      options: { set: ['config.shutdownTimeoutMs=500'] },
      override: { config: { shutdownTimeoutMs: 500 } },
      path: ['config', 'shutdownTimeoutMs'],
      keyword: 'minimum',
    },
  ],
  [
    'a spend-management URL that is not http(s)',
    {
      options: { set: ['spendManagement.url=spend-management:8080'] },
      override: { spendManagement: { url: 'spend-management:8080' } },
      path: ['spendManagement', 'url'],
      keyword: 'pattern',
    },
  ],
  [
    'a negative rate limit',
    {
      options: { set: ['config.rateLimit.max=-1'] },
      override: { config: { rateLimit: { max: -1 } } },
      path: ['config', 'rateLimit', 'max'],
      keyword: 'minimum',
    },
  ],
  [
    'a rate-limit window given as a string',
    {
      options: { setString: ['config.rateLimit.windowMs=60000'] },
      override: { config: { rateLimit: { windowMs: '60000' } } },
      path: ['config', 'rateLimit', 'windowMs'],
      keyword: 'type',
    },
  ],
  [
    'no disable in flight at all',
    {
      options: { set: ['config.disablesInFlightPerNetwork=0'] },
      override: { config: { disablesInFlightPerNetwork: 0 } },
      path: ['config', 'disablesInFlightPerNetwork'],
      keyword: 'minimum',
    },
  ],
  [
    'more batches in flight than the service accepts',
    {
      options: { set: ['config.pipeline.disableBatchesInFlight=65'] },
      override: { config: { pipeline: { disableBatchesInFlight: 65 } } },
      path: ['config', 'pipeline', 'disableBatchesInFlight'],
      keyword: 'maximum',
    },
  ],
  [
    'a worker lease under a second',
    {
      options: { set: ['config.worker.leaseMs=500'] },
      override: { config: { worker: { leaseMs: 500 } } },
      path: ['config', 'worker', 'leaseMs'],
      keyword: 'minimum',
    },
  ],
  [
    'no Secrets Manager attempt',
    {
      options: { set: ['config.secretsManager.maxAttempts=0'] },
      override: { config: { secretsManager: { maxAttempts: 0 } } },
      path: ['config', 'secretsManager', 'maxAttempts'],
      keyword: 'minimum',
    },
  ],
  [
    'an unknown trace sampler',
    {
      options: { set: ['otel.tracesSampler=sometimes'] },
      override: { otel: { tracesSampler: 'sometimes' } },
      path: ['otel', 'tracesSampler'],
      keyword: 'enum',
    },
  ],
  [
    'a sampling ratio above 1',
    {
      options: { set: ['otel.tracesSamplerArg=2'] },
      override: { otel: { tracesSamplerArg: 2 } },
      path: ['otel', 'tracesSamplerArg'],
      keyword: 'maximum',
    },
  ],
  [
    'a route without a time-out',
    {
      options: { set: ['httpRoute.requestTimeoutSeconds=0'] },
      override: { httpRoute: { requestTimeoutSeconds: 0 } },
      path: ['httpRoute', 'requestTimeoutSeconds'],
      keyword: 'minimum',
    },
  ],
];

/**
 * Helm 3 (gojsonschema) names a value `ports.http` or `(root)`, Helm 4 (santhosh-tekuri/jsonschema)
 * `at '/ports/http'` or `at ''`, each in its own English. What both print: the schema failure
 * header, and the value's path in one of the two notations.
 */
function namesPath(stderr: string, path: string[]): boolean {
  const dotted = path.length ? path.join('.') : '(root)';
  const pointer = `'${path.map((segment) => `/${segment}`).join('')}'`;
  return stderr.includes(`${dotted}:`) || stderr.includes(`at ${pointer}`);
}

describe('the rejection cases themselves (Ajv over values.schema.json)', () => {
  it('accept the default values', () => {
    expect(validateValues(defaults), JSON.stringify(validateValues.errors)).toBe(true);
  });

  it.each(rejections)('find exactly the intended error for %s', (_name, rejection) => {
    expect(validateValues(deepMerge(defaults, rejection.override))).toBe(false);
    const errors = (validateValues.errors ?? []).filter((error) => !['oneOf', 'anyOf', 'allOf'].includes(error.keyword));
    expect(errors.map((error) => ({ keyword: error.keyword, at: error.instancePath }))).toContainEqual({
      keyword: rejection.keyword,
      at: rejection.path.map((segment) => `/${segment}`).join(''),
    });
    if (rejection.property)
      expect(errors.find((error) => error.keyword === 'additionalProperties')?.params).toEqual({ additionalProperty: rejection.property });
  });
});

describe.each(helms)('%s stops on wrong values before anything is rendered', (_helm, binary) => {
  it.each(rejections)('rejects %s, naming the value', (_name, rejection) => {
    const stderr = renderError({ ...rejection.options, helm: binary.major });
    expect(stderr).toContain("values don't meet the specifications of the schema(s)");
    expect(namesPath(stderr, rejection.path), stderr).toBe(true);
    if (rejection.property) expect(stderr).toMatch(new RegExp(`\\b${rejection.property}\\b`));
  });

  it('fails helm lint on such values too', () => {
    expect(lint({ set: ['replicaCount=two'], helm: binary.major }).status).not.toBe(0);
    expect(lint({ set: ['replicas=3'], helm: binary.major }).status).not.toBe(0);
  });
});

// The chart's own `fail` messages: the same text under both majors.
describe.each(helms)('%s refuses at render time what a JSON schema cannot express', (_helm, binary) => {
  const refused = (options: RenderOptions): string => renderError({ ...options, helm: binary.major });
  const renders = (options: RenderOptions): void => {
    expect(() => render({ ...options, helm: binary.major })).not.toThrow();
  };

  it('a termination grace period not longer than preStop + drain + shutdown timeout', () => {
    // 5 s preStop + 5 s drain + 20 s shutdown = 30 s: 30 is not enough, 31 is.
    expect(refused({ set: ['lifecycle.terminationGracePeriodSeconds=30'] })).toMatch(
      /terminationGracePeriodSeconds \(30 s\) must be greater than .* = 30000 ms/,
    );
    renders({ set: ['lifecycle.terminationGracePeriodSeconds=31'] });
    expect(refused({ set: ['config.shutdownTimeoutMs=40000'] })).toMatch(/terminationGracePeriodSeconds/);
  });

  it('two partner-key sources at once', () => {
    expect(refused({ set: ['partnerKeys.secretsManager.secretId=partner-keys'] })).toMatch(/exactly one key source/);
    expect(
      refused({ set: ['partnerKeys.mode=secretsManager', 'partnerKeys.secretsManager.secretId=k', 'partnerKeys.existingSecret=s'] }),
    ).toMatch(/exactly one key source/);
  });

  it('a partner-key source without its coordinates', () => {
    expect(refused({ set: ['partnerKeys.mode=secretsManager'] })).toMatch(/secretsManager.secretId is required/);
    expect(refused({ set: ['partnerKeys.externalSecret.remoteRef.key='] })).toMatch(/remoteRef.key is required/);
    expect(refused({ set: ['partnerKeys.externalSecret.secretStoreRef.name='] })).toMatch(/secretStoreRef.name is required/);
  });

  it('a disruption budget that could never let a node drain, or one with both limits', () => {
    expect(refused({ set: ['podDisruptionBudget.maxUnavailable=', 'podDisruptionBudget.minAvailable=2'] })).toMatch(
      /minAvailable \(2\) must be below the replica count \(2\)/,
    );
    expect(refused({ set: ['podDisruptionBudget.minAvailable=1'] })).toMatch(/exactly one of minAvailable and maxUnavailable/);
  });

  it('an autoscaler whose minimum exceeds its maximum', () => {
    expect(refused({ set: ['autoscaling.enabled=true', 'autoscaling.minReplicas=5', 'autoscaling.maxReplicas=3'] })).toMatch(
      /minReplicas must not exceed/,
    );
  });

  it('an API version whose sunset is before its deprecation', () => {
    const deprecation = (sunsetAt: string) =>
      `config.apiVersionDeprecations={"2026-11-21":{"deprecatedAt":"2027-06-01T00:00:00Z","sunsetAt":"${sunsetAt}","link":"https://e.example/v"}}`;
    expect(refused({ setJson: [deprecation('2027-05-31T23:59:59Z')] })).toMatch(
      /config.apiVersionDeprecations.2026-11-21: sunsetAt \(2027-05-31T23:59:59Z\) must not be before deprecatedAt \(2027-06-01T00:00:00Z\)/,
    );
    renders({ setJson: [deprecation('2027-06-01T00:00:00Z')] });
    renders({
      setJson: ['config.apiVersionDeprecations={"2026-11-21":{"deprecatedAt":"2027-06-01T00:00:00+02:00","link":"https://e.example/v"}}'],
    });
  });

  it('a worker backoff whose first delay exceeds its cap', () => {
    expect(refused({ set: ['config.worker.backoffBaseMs=30000'] })).toMatch(/backoffBaseMs must not exceed config.worker.backoffMaxMs/);
    renders({ set: ['config.worker.backoffBaseMs=20000'] });
  });

  describe('the request deadline stays below the time-out of the proxy in front', () => {
    const route = ['httpRoute.enabled=true', 'httpRoute.parentRefs[0].name=gw'];

    it('HTTPRoute: 30 s passes a 25 s deadline; a deadline raised to 30 s or more is refused', () => {
      renders({ set: route });
      renders({ set: [...route, 'config.requestDeadlineMs=29000'] });
      expect(refused({ set: [...route, 'config.requestDeadlineMs=30000'] })).toMatch(
        /httpRoute.requestTimeoutSeconds \(30 s\) must be above config.requestDeadlineMs \(30000 ms\)/,
      );
      renders({ set: [...route, 'config.requestDeadlineMs=30000', 'httpRoute.requestTimeoutSeconds=35'] });
    });

    it('Ingress: the same rule for proxyTimeoutSeconds', () => {
      renders({ set: ['ingress.enabled=true'] });
      expect(refused({ set: ['ingress.enabled=true', 'ingress.proxyTimeoutSeconds=20'] })).toMatch(
        /ingress.proxyTimeoutSeconds \(20 s\) must be above config.requestDeadlineMs \(25000 ms\)/,
      );
    });

    it('does not care while the way in is off', () => {
      renders({ set: ['config.requestDeadlineMs=60000', 'lifecycle.terminationGracePeriodSeconds=40'] });
    });
  });

  it('an HTTPRoute attached to no Gateway', () => {
    expect(refused({ set: ['httpRoute.enabled=true'] })).toMatch(/httpRoute.parentRefs must name at least one Gateway/);
  });

  it('ingress annotations that would undo the time-outs or replay a POST', () => {
    const ingress = 'ingress.enabled=true';
    expect(refused({ set: [ingress], setString: ['ingress.annotations.nginx\\.ingress\\.kubernetes\\.io/proxy-read-timeout=10'] })).toMatch(
      /must not set nginx.ingress.kubernetes.io\/proxy-read-timeout: the chart sets it from ingress.proxyTimeoutSeconds/,
    );
    expect(
      refused({ set: [ingress, 'ingress.annotations.nginx\\.ingress\\.kubernetes\\.io/proxy-next-upstream=error timeout non_idempotent'] }),
    ).toMatch(/must not contain non_idempotent/);
  });

  it('an Ingress TLS host that the Ingress does not serve', () => {
    expect(
      refused({
        set: [
          'ingress.enabled=true',
          'ingress.hosts[0]=a.example.com',
          'ingress.tls[0].hosts[0]=b.example.com',
          'ingress.tls[0].secretName=t',
        ],
      }),
    ).toMatch(/ingress.tls\[0\] names host b.example.com, which is not in ingress.hosts/);
  });
});
