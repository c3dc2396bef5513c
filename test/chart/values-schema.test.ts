import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { load } from 'js-yaml';
import { describe, it, expect } from 'vitest';
import { chartDir, lint, render, renderError } from './chart.js';

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
    else if (typeof resolved.additionalProperties === 'object') missing.push(...undescribed(child, resolved.additionalProperties, childPath));
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

describe('wrong values stop helm before anything is rendered', () => {
  it('rejects a string replica count (--set replicaCount=two)', () => {
    expect(renderError({ set: ['replicaCount=two'] })).toMatch(/replicaCount: Invalid type. Expected: integer, given: string/);
    expect(lint({ set: ['replicaCount=two'] }).status).not.toBe(0);
  });

  it('rejects a quoted number as replica count', () => {
    expect(renderError({ setString: ['replicaCount=3'] })).toMatch(/replicaCount: Invalid type/);
  });

  it('rejects an unknown top-level key', () => {
    expect(renderError({ set: ['replicas=3'] })).toMatch(/Additional property replicas is not allowed/);
    expect(lint({ set: ['replicas=3'] }).status).not.toBe(0);
  });

  it('rejects an unknown nested key, such as an attempt to move a probe path', () => {
    expect(renderError({ set: ['probes.liveness.path=/healthz'] })).toMatch(/Additional property path is not allowed/);
  });

  it('rejects a port the non-root service cannot bind, and a string port', () => {
    expect(renderError({ set: ['ports.http=80'] })).toMatch(/ports.http/);
    expect(renderError({ setString: ['ports.metrics=9464'] })).toMatch(/ports.metrics/);
  });

  it('rejects an unknown partner-keys mode and an unknown log level', () => {
    expect(renderError({ set: ['partnerKeys.mode=vault'] })).toMatch(/partnerKeys.mode/);
    expect(renderError({ set: ['config.logLevel=verbose'] })).toMatch(/config.logLevel/);
  });

  it('rejects what the service itself would refuse at start, such as a key poll slower than 10 s', () => {
    expect(renderError({ set: ['partnerKeys.pollIntervalMs=20000'] })).toMatch(/partnerKeys.pollIntervalMs: Must be less than or equal to 10000/);
    expect(renderError({ set: ['database.poolSize=0'] })).toMatch(/database.poolSize/);
    expect(renderError({ set: ['config.shutdownTimeoutMs=500'] })).toMatch(/config.shutdownTimeoutMs/);
  });

  it('rejects a spend-management URL that is not http(s)', () => {
    expect(renderError({ set: ['spendManagement.url=spend-management:8080'] })).toMatch(/spendManagement.url/);
  });
});

describe('rules a JSON schema cannot express are checked at render time', () => {
  it('refuses a termination grace period not longer than preStop + drain + shutdown timeout', () => {
    // 5 s preStop + 5 s drain + 20 s shutdown = 30 s: 30 is not enough, 31 is.
    expect(renderError({ set: ['lifecycle.terminationGracePeriodSeconds=30'] })).toMatch(
      /terminationGracePeriodSeconds \(30 s\) must be greater than .* = 30000 ms/,
    );
    expect(() => render({ set: ['lifecycle.terminationGracePeriodSeconds=31'] })).not.toThrow();
    expect(renderError({ set: ['config.shutdownTimeoutMs=40000'] })).toMatch(/terminationGracePeriodSeconds/);
  });

  it('refuses two partner-key sources at once', () => {
    expect(renderError({ set: ['partnerKeys.secretsManager.secretId=partner-keys'] })).toMatch(/exactly one key source/);
    expect(
      renderError({ set: ['partnerKeys.mode=secretsManager', 'partnerKeys.secretsManager.secretId=k', 'partnerKeys.existingSecret=s'] }),
    ).toMatch(/exactly one key source/);
  });

  it('refuses a partner-key source without its coordinates', () => {
    expect(renderError({ set: ['partnerKeys.mode=secretsManager'] })).toMatch(/secretsManager.secretId is required/);
    expect(renderError({ set: ['partnerKeys.externalSecret.remoteRef.key='] })).toMatch(/remoteRef.key is required/);
    expect(renderError({ set: ['partnerKeys.externalSecret.secretStoreRef.name='] })).toMatch(/secretStoreRef.name is required/);
  });

  it('refuses a disruption budget that could never let a node drain, or one with both limits', () => {
    expect(renderError({ set: ['podDisruptionBudget.maxUnavailable=', 'podDisruptionBudget.minAvailable=2'] })).toMatch(
      /minAvailable \(2\) must be below the replica count \(2\)/,
    );
    expect(renderError({ set: ['podDisruptionBudget.minAvailable=1'] })).toMatch(/exactly one of minAvailable and maxUnavailable/);
  });

  it('refuses an autoscaler whose minimum exceeds its maximum', () => {
    expect(renderError({ set: ['autoscaling.enabled=true', 'autoscaling.minReplicas=5', 'autoscaling.maxReplicas=3'] })).toMatch(
      /minReplicas must not exceed/,
    );
  });
});
