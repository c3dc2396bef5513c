import { describe, it, expect } from 'vitest';
import type { IDeployment } from 'kubernetes-models/apps/v1';
import type { IHorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import type { IIngress, INetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import type { IPodDisruptionBudget } from 'kubernetes-models/policy/v1';
import type { IService } from 'kubernetes-models/v1';
import { findAll, findOne, render, type RenderOptions } from './chart.js';

const everything = { values: ['ci/everything-values.yaml'] };

function podLabels(options: RenderOptions = {}): Record<string, string> {
  return findOne<IDeployment>(render(options), 'Deployment').spec?.template.metadata?.labels ?? {};
}

describe('Service', () => {
  it('exposes http on 8080 and metrics on 9464, inside the cluster only', () => {
    const service = findOne<IService>(render(), 'Service');
    expect(service.spec?.type).toBe('ClusterIP');
    expect(service.spec?.ports?.map(({ name, port, targetPort }) => ({ name, port, targetPort }))).toEqual([
      { name: 'http', port: 8080, targetPort: 'http' },
      { name: 'metrics', port: 9464, targetPort: 'metrics' },
    ]);
  });

  it('selects the service pods', () => {
    const selector = findOne<IService>(render(), 'Service').spec?.selector ?? {};
    expect(Object.keys(selector).length).toBeGreaterThan(0);
    expect(podLabels()).toMatchObject(selector);
  });
});

describe('Ingress', () => {
  it('is off by default', () => {
    expect(findAll(render(), 'Ingress')).toEqual([]);
  });

  it('routes nothing but the /partner/ prefix, to the http port', () => {
    for (const options of [everything, { set: ['ingress.enabled=true'] }]) {
      const ingress = findOne<IIngress>(render(options), 'Ingress');
      const rules = ingress.spec?.rules ?? [];
      expect(rules.length).toBeGreaterThan(0);
      for (const rule of rules) {
        expect(rule.http?.paths).toEqual([
          {
            path: '/partner/',
            pathType: 'Prefix',
            backend: { service: { name: findOne<IService>(render(options), 'Service').metadata?.name, port: { name: 'http' } } },
          },
        ]);
      }
      expect(ingress.spec?.defaultBackend).toBeUndefined();
    }
  });

  it('takes class, hosts and TLS from values', () => {
    const ingress = findOne<IIngress>(render(everything), 'Ingress');
    expect(ingress.spec?.ingressClassName).toBe('nginx');
    expect(ingress.spec?.rules?.map((r) => r.host)).toEqual(['partner-api.example.com']);
    expect(ingress.spec?.tls).toEqual([{ hosts: ['partner-api.example.com'], secretName: 'partner-api-tls' }]);
  });

  it('serves any host when none is given', () => {
    const rules = findOne<IIngress>(render({ set: ['ingress.enabled=true'] }), 'Ingress').spec?.rules ?? [];
    expect(rules).toHaveLength(1);
    expect(rules[0]?.host).toBeUndefined();
  });
});

describe('NetworkPolicy', () => {
  const policy = (): INetworkPolicy => findOne<INetworkPolicy>(render(everything), 'NetworkPolicy');

  it('is off by default', () => {
    expect(findAll(render(), 'NetworkPolicy')).toEqual([]);
  });

  it('applies to the service pods, in both directions', () => {
    expect(podLabels(everything)).toMatchObject(policy().spec?.podSelector?.matchLabels ?? { missing: 'selector' });
    expect(policy().spec?.policyTypes).toEqual(['Ingress', 'Egress']);
  });

  it('lets in the ingress controller (and the helm test pods) on http, and Prometheus on metrics, nothing else', () => {
    const rules = policy().spec?.ingress ?? [];
    expect(rules.map((r) => r.ports?.map((p) => p.port))).toEqual([['http'], ['metrics']]);
    const [http, metrics] = rules;
    expect(http?.from).toContainEqual({
      namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'ingress-nginx' } },
      podSelector: { matchLabels: { 'app.kubernetes.io/name': 'ingress-nginx' } },
    });
    expect(http?.from).toContainEqual({
      podSelector: {
        matchLabels: { 'app.kubernetes.io/name': 'partner-agent-status', 'app.kubernetes.io/instance': 'pas', 'app.kubernetes.io/component': 'test' },
      },
    });
    expect(metrics?.from).toEqual([
      {
        namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } },
        podSelector: { matchLabels: { 'app.kubernetes.io/name': 'prometheus' } },
      },
    ]);
    for (const rule of rules) expect(rule.from?.length, 'a rule without peers would admit everyone').toBeGreaterThan(0);
  });

  it('lets out DNS, PostgreSQL, Redis, spend management and AWS, to the configured peers', () => {
    const egress = policy().spec?.egress ?? [];
    const ports = egress.map((rule) => (rule.ports ?? []).map((p) => `${String(p.port)}/${p.protocol ?? 'TCP'}`));
    expect(ports).toEqual([['53/UDP', '53/TCP'], ['5432/TCP'], ['6379/TCP'], ['8080/TCP'], ['443/TCP'], ['4318/TCP']]);
    expect(egress[1]?.to).toEqual([{ ipBlock: { cidr: '10.20.0.0/16' } }]);
    expect(egress[4]?.to).toEqual([{ ipBlock: { cidr: '0.0.0.0/0', except: ['169.254.169.254/32'] } }]);
    for (const rule of egress) expect(rule.ports?.length, 'an egress rule without ports would allow every port').toBeGreaterThan(0);
  });
});

describe('HorizontalPodAutoscaler', () => {
  it('is off by default', () => {
    expect(findAll(render(), 'HorizontalPodAutoscaler')).toEqual([]);
  });

  it('scales the Deployment on CPU and on requests per second per pod', () => {
    const hpa = findOne<IHorizontalPodAutoscaler>(render(everything), 'HorizontalPodAutoscaler');
    expect(hpa.apiVersion).toBe('autoscaling/v2');
    expect(hpa.spec?.scaleTargetRef).toEqual({
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      name: findOne<IDeployment>(render(everything), 'Deployment').metadata?.name,
    });
    expect(hpa.spec).toMatchObject({ minReplicas: 3, maxReplicas: 12 });
    expect(hpa.spec?.metrics).toEqual([
      { type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: 60 } } },
      {
        type: 'Pods',
        pods: {
          metric: { name: 'partner_agent_status_http_requests_per_second' },
          target: { type: 'AverageValue', averageValue: '40' },
        },
      },
    ]);
  });
});

describe('PodDisruptionBudget', () => {
  it('lets one pod go at a time by default, and lets nodes drain unready pods', () => {
    const pdb = findOne<IPodDisruptionBudget>(render(), 'PodDisruptionBudget');
    expect(pdb.spec?.maxUnavailable).toBe(1);
    expect(pdb.spec?.minAvailable).toBeUndefined();
    expect(pdb.spec?.unhealthyPodEvictionPolicy).toBe('AlwaysAllow');
    expect(podLabels()).toMatchObject(pdb.spec?.selector?.matchLabels ?? { missing: 'selector' });
  });

  it('keeps minAvailable below the autoscaler minimum', () => {
    const pdb = findOne<IPodDisruptionBudget>(render(everything), 'PodDisruptionBudget');
    expect(pdb.spec?.minAvailable).toBe(2);
    expect(pdb.spec?.maxUnavailable).toBeUndefined();
  });
});
