import type { IHTTPRoute } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1';
import type { IDeployment } from 'kubernetes-models/apps/v1';
import type { IHorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import type { IIngress, INetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import type { IPodDisruptionBudget } from 'kubernetes-models/policy/v1';
import type { IConfigMap, IService } from 'kubernetes-models/v1';
import { describe, expect, it } from 'vitest';
import { findAll, findOne, helms, type K8sObject, type RenderOptions, render, validateObject } from './chart.js';

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

const route = { set: ['httpRoute.enabled=true', 'httpRoute.parentRefs[0].name=partner-gateway'] };

describe('the way in', () => {
  it('is off by default: neither an HTTPRoute nor an Ingress', () => {
    expect(findAll(render(), 'HTTPRoute')).toEqual([]);
    expect(findAll(render(), 'Ingress')).toEqual([]);
  });
});

// Both variants, rendered and schema-validated under both Helm majors.
describe.each(helms)('%s', (_helm, binary) => {
  const as = (options: RenderOptions): RenderOptions => ({ ...options, helm: binary.major });

  describe('HTTPRoute (Gateway API, the recommended way in)', () => {
    const httpRoute = (options: RenderOptions = everything): IHTTPRoute => findOne<IHTTPRoute>(render(as(options)), 'HTTPRoute');

    it.each([
      ['ci/everything-values.yaml', everything],
      ['ci/gateway-api-values.yaml', { values: ['ci/gateway-api-values.yaml'] }],
      ['the least settings', route],
    ])('is a valid gateway.networking.k8s.io/v1 HTTPRoute with %s', (_name, options) => {
      const object = httpRoute(options);
      expect(object.apiVersion).toBe('gateway.networking.k8s.io/v1');
      validateObject(object as unknown as K8sObject);
    });

    it('attaches to the Gateway listener named in values', () => {
      expect(httpRoute().spec?.parentRefs).toEqual([
        { group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'partner-gateway', namespace: 'gateway-system', sectionName: 'https' },
      ]);
      // Without a namespace the Gateway is looked up in the route's own namespace.
      expect(httpRoute(route).spec?.parentRefs).toEqual([{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'partner-gateway' }]);
    });

    it('routes nothing but the /partner/ prefix, to the Service http port: the events feed by a rule of its own', () => {
      const service = findOne<IService>(render(as(everything)), 'Service');
      const rules = httpRoute().spec?.rules ?? [];
      expect(rules).toHaveLength(2);
      expect(rules.map((rule) => rule.matches)).toEqual([
        [{ path: { type: 'Exact', value: '/partner/events' } }],
        [{ path: { type: 'PathPrefix', value: '/partner/' } }],
      ]);
      for (const rule of rules) {
        expect(rule.backendRefs).toEqual([
          { group: '', kind: 'Service', name: service.metadata?.name, port: service.spec?.ports?.find((p) => p.name === 'http')?.port },
        ]);
      }
    });

    it("lets the events feed's streams last an hour (a line every 10 s keeps them from idling out); the clients resume with Last-Event-ID", () => {
      expect(httpRoute(route).spec?.rules?.[0]?.timeouts).toEqual({ request: '3600s' });
      expect(httpRoute({ set: [...route.set, 'httpRoute.eventStreamTimeoutSeconds=600'] }).spec?.rules?.[0]?.timeouts).toEqual({
        request: '600s',
      });
      expect(httpRoute(route).spec?.rules?.[0]?.filters).toEqual(httpRoute(route).spec?.rules?.[1]?.filters);
    });

    it('serves the host names from values, or every host of the listener', () => {
      expect(httpRoute().spec?.hostnames).toEqual(['partner-api.example.com']);
      expect(httpRoute(route).spec?.hostnames).toBeUndefined();
    });

    it('waits 30 s for a response by default: above the 25 s request deadline', () => {
      const config = findOne<IConfigMap>(render(as(route)), 'ConfigMap').data ?? {};
      expect(httpRoute(route).spec?.rules?.[1]?.timeouts).toEqual({ request: '30s' });
      expect(30_000).toBeGreaterThan(Number(config.REQUEST_DEADLINE_MS));
      expect(httpRoute().spec?.rules?.[1]?.timeouts).toEqual({ request: '35s' });
    });

    it('configures no retry: a replayed POST would count twice against the rate limit', () => {
      for (const rule of httpRoute().spec?.rules ?? []) expect(rule).not.toHaveProperty('retry');
    });

    it("strips partners' trace context and baggage before the service, unless told not to", () => {
      expect(httpRoute(route).spec?.rules?.[0]?.filters).toEqual([
        { type: 'RequestHeaderModifier', requestHeaderModifier: { remove: ['traceparent', 'tracestate', 'baggage'] } },
      ]);
      expect(httpRoute({ ...route, setJson: ['httpRoute.removeRequestHeaders=[]'] }).spec?.rules?.[0]?.filters).toBeUndefined();
    });

    it('carries the extra labels from values', () => {
      expect(httpRoute().metadata?.labels?.['example.com/exposure']).toBe('internet');
    });
  });

  describe('Ingress (the option for clusters without Gateway API)', () => {
    const ingress = (options: RenderOptions = everything): IIngress => findOne<IIngress>(render(as(options)), 'Ingress');

    it.each([
      ['ci/everything-values.yaml', everything],
      ['the least settings', { set: ['ingress.enabled=true'] }],
    ])('is a valid networking.k8s.io/v1 Ingress with %s', (_name, options) => {
      validateObject(ingress(options) as unknown as K8sObject);
    });

    it('routes nothing but the /partner/ prefix, to the http port', () => {
      for (const options of [everything, { set: ['ingress.enabled=true'] }]) {
        const rules = ingress(options).spec?.rules ?? [];
        expect(rules.length).toBeGreaterThan(0);
        for (const rule of rules) {
          expect(rule.http?.paths).toEqual([
            {
              path: '/partner/',
              pathType: 'Prefix',
              backend: { service: { name: findOne<IService>(render(as(options)), 'Service').metadata?.name, port: { name: 'http' } } },
            },
          ]);
        }
        expect(ingress(options).spec?.defaultBackend).toBeUndefined();
      }
    });

    it('takes class, hosts and TLS from values', () => {
      expect(ingress().spec?.ingressClassName).toBe('nginx');
      expect(ingress().spec?.rules?.map((r) => r.host)).toEqual(['partner-api.example.com']);
      expect(ingress().spec?.tls).toEqual([{ hosts: ['partner-api.example.com'], secretName: 'partner-api-tls' }]);
    });

    it('serves any host when none is given', () => {
      const rules = ingress({ set: ['ingress.enabled=true'] }).spec?.rules ?? [];
      expect(rules).toHaveLength(1);
      expect(rules[0]?.host).toBeUndefined();
    });

    it('waits 30 s between reads and writes by default (above the 25 s deadline), and never retries a POST', () => {
      const annotations = ingress({ set: ['ingress.enabled=true'] }).metadata?.annotations ?? {};
      expect(annotations).toMatchObject({
        'nginx.ingress.kubernetes.io/proxy-read-timeout': '30',
        'nginx.ingress.kubernetes.io/proxy-send-timeout': '30',
        'nginx.ingress.kubernetes.io/proxy-next-upstream': 'error timeout',
      });
      for (const value of Object.values(annotations)) expect(value).not.toContain('non_idempotent');
    });

    it('keeps the annotations from values beside its own', () => {
      expect(ingress().metadata?.annotations).toMatchObject({
        'nginx.ingress.kubernetes.io/proxy-body-size': '64k',
        'cert-manager.io/cluster-issuer': 'letsencrypt',
        'nginx.ingress.kubernetes.io/proxy-read-timeout': '35',
      });
    });
  });
});

describe('NetworkPolicy', () => {
  const policy = (options: RenderOptions = {}): INetworkPolicy => findOne<INetworkPolicy>(render(options), 'NetworkPolicy');

  it('is on by default, and can be switched off', () => {
    expect(findAll(render(), 'NetworkPolicy')).toHaveLength(1);
    expect(findAll(render({ set: ['networkPolicy.enabled=false'] }), 'NetworkPolicy')).toEqual([]);
  });

  it('applies to the service pods, in both directions', () => {
    expect(podLabels()).toMatchObject(policy().spec?.podSelector?.matchLabels ?? { missing: 'selector' });
    expect(policy().spec?.policyTypes).toEqual(['Ingress', 'Egress']);
  });

  it("lets in the Gateway's namespace (and the helm test pods) on http, and the monitoring namespace on metrics, nothing else", () => {
    const rules = policy().spec?.ingress ?? [];
    expect(rules.map((r) => r.ports?.map((p) => p.port))).toEqual([['http'], ['metrics']]);
    const [http, metrics] = rules;
    expect(http?.from).toEqual([
      { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'envoy-gateway-system' } } },
      {
        podSelector: {
          matchLabels: {
            'app.kubernetes.io/name': 'partner-agent-status',
            'app.kubernetes.io/instance': 'pas',
            'app.kubernetes.io/component': 'test',
          },
        },
      },
    ]);
    expect(metrics?.from).toEqual([{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } }]);
    for (const rule of rules) expect(rule.from?.length, 'a rule without peers would admit everyone').toBeGreaterThan(0);
  });

  it('closes the metrics port when no peer is given for it', () => {
    expect(policy({ setJson: ['networkPolicy.ingress.metrics=[]'] }).spec?.ingress?.map((r) => r.ports?.map((p) => p.port))).toEqual([
      ['http'],
    ]);
  });

  // Egress: test/chart/egress.test.ts.
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
