import { describe, expect, it } from 'vitest';
import {
  ciValuesFiles,
  helms,
  type K8sObject,
  KUBE_VERSIONS,
  lint,
  NAMESPACE,
  type RenderOptions,
  render,
  validateObject,
} from './chart.js';

const valueSets: Array<[string, RenderOptions]> = [
  ['the default values', {}],
  ...ciValuesFiles.map((file): [string, RenderOptions] => [file, { values: [file] }]),
];

// Every supported Helm major, for the oldest and the newest Kubernetes the chart is tested with:
// lint and render each values set, and validate every rendered object against its schema.
describe.each(helms)('%s', (_helm, binary) => {
  describe.each(KUBE_VERSIONS.map((version) => [`Kubernetes ${version}`, version] as const))('for %s', (_kube, kubeVersion) => {
    const at = (options: RenderOptions): RenderOptions => ({ ...options, helm: binary.major, kubeVersion });

    it.each(valueSets)('helm lint --strict passes with %s', (_name, options) => {
      const result = lint(at(options));
      expect(result.stderr + result.stdout).toContain('0 chart(s) failed');
      expect(result.status).toBe(0);
    });

    it.each(valueSets)('every object rendered with %s matches its Kubernetes or CRD schema', (_name, options) => {
      const objects = render(at(options));
      expect(objects.length).toBeGreaterThan(0);
      for (const object of objects) validateObject(object);
    });
  });

  it('renders the same objects as the other major', () => {
    const other = helms.find(([, candidate]) => candidate.major !== binary.major)![1];
    for (const [, options] of valueSets) {
      expect(render({ ...options, helm: binary.major })).toEqual(render({ ...options, helm: other.major }));
    }
  });
});

describe('rendered objects', () => {
  it('covers every feature with ci/everything-values.yaml', () => {
    const kinds = new Set(render({ values: ['ci/everything-values.yaml'] }).map((object) => object.kind));
    expect([...kinds].sort()).toEqual(
      [
        'BackendTrafficPolicy',
        'ConfigMap',
        'Deployment',
        'ExternalSecret',
        'HorizontalPodAutoscaler',
        'HTTPRoute',
        'Ingress',
        'Job',
        'NetworkPolicy',
        'Pod',
        'PodDisruptionBudget',
        'PrometheusRule',
        'Service',
        'ServiceAccount',
        'ServiceMonitor',
        'Stream',
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
  it('runs two different Helm majors: 4.x and 3.17 or later', () => {
    expect(helms.map(([, binary]) => binary.major)).toEqual([4, 3]);
    expect(helms[0]![1].version).toMatch(/^4\.\d+\.\d+$/);
    expect(helms[1]![1].version).toMatch(/^3\.(1[7-9]|[2-9]\d)\.\d+$/);
  });

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

  it('checks the NACK Stream against its CRD: an unknown storage or a misspelt field is invalid', () => {
    const stream = (spec: Record<string, unknown>): K8sObject => ({
      apiVersion: 'jetstream.nats.io/v1beta2',
      kind: 'Stream',
      metadata: { name: 'events' },
      spec: { name: 'EVENTS', subjects: ['events.>'], ...spec },
    });
    expect(() => validateObject(stream({ storage: 'file', replicas: 3 }))).not.toThrow();
    expect(() => validateObject(stream({ storage: 'disk' }))).toThrow(/jetstream.nats.io\/v1beta2\/Stream events is invalid/);
    expect(() => validateObject(stream({ replica: 3 }))).toThrow(/is invalid/);
  });

  it('checks Gateway API objects too: an HTTPRoute time-out that is not a Gateway API duration is invalid', () => {
    const route: K8sObject = {
      apiVersion: 'gateway.networking.k8s.io/v1',
      kind: 'HTTPRoute',
      metadata: { name: 'slow' },
      spec: { parentRefs: [{ name: 'gw' }], rules: [{ timeouts: { request: '30 seconds' } }] },
    };
    expect(() => validateObject(route)).toThrow(/gateway.networking.k8s.io\/v1\/HTTPRoute slow is invalid/);
  });
});
