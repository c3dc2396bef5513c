import { describe, it, expect } from 'vitest';
import { ciValuesFiles, lint, NAMESPACE, render, validateObject, type K8sObject, type RenderOptions } from './chart.js';

const valueSets: Array<[string, RenderOptions]> = [
  ['the default values', {}],
  ...ciValuesFiles.map((file): [string, RenderOptions] => [file, { values: [file] }]),
];

describe('helm lint --strict passes', () => {
  it.each(valueSets)('with %s', (_name, options) => {
    const result = lint(options);
    expect(result.stderr + result.stdout).toContain('0 chart(s) failed');
    expect(result.status).toBe(0);
  });
});

describe('every rendered object matches its Kubernetes or CRD schema', () => {
  it.each(valueSets)('with %s', (_name, options) => {
    const objects = render(options);
    expect(objects.length).toBeGreaterThan(0);
    for (const object of objects) validateObject(object);
  });

  it('covers every feature with ci/everything-values.yaml', () => {
    const kinds = new Set(render({ values: ['ci/everything-values.yaml'] }).map((object) => object.kind));
    expect([...kinds].sort()).toEqual(
      [
        'ConfigMap',
        'Deployment',
        'ExternalSecret',
        'HorizontalPodAutoscaler',
        'Ingress',
        'Job',
        'NetworkPolicy',
        'Pod',
        'PodDisruptionBudget',
        'PrometheusRule',
        'Service',
        'ServiceAccount',
        'ServiceMonitor',
      ].sort(),
    );
  });

  it.each(valueSets)('puts the app.kubernetes.io labels and a namespace on every object with %s', (_name, options) => {
    for (const object of render(options)) {
      const labels = object.metadata.labels ?? {};
      expect(labels['app.kubernetes.io/name'], object.metadata.name).toBe('partner-agent-status');
      expect(labels['app.kubernetes.io/instance'], object.metadata.name).toBe('pas');
      expect(labels['app.kubernetes.io/managed-by'], object.metadata.name).toBe('Helm');
      expect(labels['app.kubernetes.io/version'], object.metadata.name).toBeTruthy();
      expect(object.metadata.namespace, object.metadata.name).toBeTruthy();
    }
  });

  it('keeps every object except the dashboards in the release namespace', () => {
    for (const object of render({ values: ['ci/everything-values.yaml'] })) {
      const isDashboard = object.metadata.labels?.['app.kubernetes.io/component'] === 'dashboards';
      expect(object.metadata.namespace, object.metadata.name).toBe(isDashboard ? 'monitoring' : NAMESPACE);
    }
  });
});

describe('the schema check itself', () => {
  it('fails on an object kind that has no model, instead of skipping it', () => {
    const unknown: K8sObject = { apiVersion: 'example.com/v1', kind: 'Widget', metadata: { name: 'w' } };
    expect(() => validateObject(unknown)).toThrow(/no schema model for example.com\/v1\/Widget/);
  });

  it('fails on an object that breaks its schema', () => {
    const broken: K8sObject = {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'broken' },
      spec: { ports: [{ name: 'http', port: 'eighty' }] },
    };
    expect(() => validateObject(broken)).toThrow(/v1\/Service broken is invalid/);
  });
});
