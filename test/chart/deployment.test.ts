import type { IDeployment } from 'kubernetes-models/apps/v1';
import type { IJob } from 'kubernetes-models/batch/v1';
import type { IConfigMap, IContainer, IPod, IPodSpec, IServiceAccount } from 'kubernetes-models/v1';
import { describe, expect, it } from 'vitest';
import { ciValuesFiles, findAll, findOne, type K8sObject, type RenderOptions, render } from './chart.js';

const valueSets: Array<[string, RenderOptions]> = [
  ['the default values', {}],
  ...ciValuesFiles.map((file): [string, RenderOptions] => [file, { values: [file] }]),
];

function deployment(options: RenderOptions = {}): IDeployment {
  return findOne<IDeployment>(render(options), 'Deployment');
}

function podSpec(options: RenderOptions = {}): IPodSpec {
  const spec = deployment(options).spec?.template.spec;
  if (!spec) throw new Error('the Deployment has no pod spec');
  return spec;
}

function apiContainer(options: RenderOptions = {}): IContainer {
  const container = podSpec(options).containers.find((c) => c.name === 'api');
  if (!container) throw new Error('the Deployment has no container named api');
  return container;
}

function envConfigMap(options: RenderOptions = {}): Record<string, string> {
  const configMaps = findAll<IConfigMap>(render(options), 'ConfigMap');
  const name = apiContainer(options).envFrom?.[0]?.configMapRef?.name;
  const configMap = configMaps.find((c) => c.metadata?.name === name);
  if (!configMap?.data) throw new Error(`no ConfigMap ${name} for envFrom`);
  return configMap.data;
}

/** Every pod the chart can start: the service, the migration hook and the helm test pods. */
function allPodSpecs(objects: K8sObject[]): Array<[string, IPodSpec]> {
  const specs: Array<[string, IPodSpec | undefined]> = [
    ...findAll<IDeployment>(objects, 'Deployment').map((d): [string, IPodSpec | undefined] => [
      d.metadata?.name ?? '',
      d.spec?.template.spec,
    ]),
    ...findAll<IJob>(objects, 'Job').map((j): [string, IPodSpec | undefined] => [j.metadata?.name ?? '', j.spec?.template.spec]),
    ...findAll<IPod>(objects, 'Pod').map((p): [string, IPodSpec | undefined] => [p.metadata?.name ?? '', p.spec]),
  ];
  return specs.map(([name, spec]) => {
    if (!spec) throw new Error(`${name} has no pod spec`);
    return [name, spec];
  });
}

describe('probes', () => {
  it('checks startup and liveness with GET /livez and readiness with GET /readyz, on the http port', () => {
    const container = apiContainer();
    expect(container.startupProbe?.httpGet).toMatchObject({ path: '/livez', port: 'http' });
    expect(container.livenessProbe?.httpGet).toMatchObject({ path: '/livez', port: 'http' });
    expect(container.readinessProbe?.httpGet).toMatchObject({ path: '/readyz', port: 'http' });
    for (const probe of [container.startupProbe, container.livenessProbe, container.readinessProbe]) {
      expect(probe?.exec).toBeUndefined();
      expect(probe?.httpGet?.scheme ?? 'HTTP').toBe('HTTP');
    }
  });

  it('gives the service a minute to start before liveness counts', () => {
    const probe = apiContainer().startupProbe;
    expect((probe?.periodSeconds ?? 10) * (probe?.failureThreshold ?? 3)).toBeGreaterThanOrEqual(60);
  });
});

describe('ports', () => {
  it('names port 8080 http and port 9464 metrics', () => {
    expect(apiContainer().ports).toEqual([
      { name: 'http', containerPort: 8080, protocol: 'TCP' },
      { name: 'metrics', containerPort: 9464, protocol: 'TCP' },
    ]);
  });

  it('tells the service the same ports through PORT and METRICS_PORT', () => {
    expect(envConfigMap()).toMatchObject({ PORT: '8080', METRICS_PORT: '9464' });
    const moved = { set: ['ports.http=8081', 'ports.metrics=9465'] };
    expect(envConfigMap(moved)).toMatchObject({ PORT: '8081', METRICS_PORT: '9465' });
    expect(apiContainer(moved).ports?.map((p) => p.containerPort)).toEqual([8081, 9465]);
  });
});

describe('restricted security context', () => {
  it.each(valueSets)('holds for every pod and container of the chart with %s', (_name, options) => {
    const specs = allPodSpecs(render(options));
    expect(specs.length).toBeGreaterThanOrEqual(3);
    for (const [name, spec] of specs) {
      expect(spec.securityContext, name).toMatchObject({
        runAsNonRoot: true,
        runAsUser: 65532,
        runAsGroup: 65532,
        seccompProfile: { type: 'RuntimeDefault' },
      });
      expect(spec.automountServiceAccountToken, name).toBe(false);
      expect(spec.hostNetwork ?? false, name).toBe(false);
      expect(spec.hostPID ?? false, name).toBe(false);
      for (const container of [...spec.containers, ...(spec.initContainers ?? [])]) {
        const context = container.securityContext;
        expect(context, `${name}/${container.name}`).toMatchObject({
          runAsNonRoot: true,
          readOnlyRootFilesystem: true,
          allowPrivilegeEscalation: false,
          capabilities: { drop: ['ALL'] },
          seccompProfile: { type: 'RuntimeDefault' },
        });
        expect(context?.privileged ?? false, `${name}/${container.name}`).toBe(false);
        expect(context?.capabilities?.add ?? [], `${name}/${container.name}`).toEqual([]);
      }
    }
  });

  it('gives the service a writable /tmp on an emptyDir, its only writable path', () => {
    const spec = podSpec();
    const tmp = apiContainer().volumeMounts?.find((m) => m.mountPath === '/tmp');
    expect(tmp).toBeDefined();
    expect(spec.volumes?.find((v) => v.name === tmp?.name)?.emptyDir).toBeDefined();
  });

  it('does not mount a ServiceAccount token, and its ServiceAccount does not either', () => {
    expect(podSpec().automountServiceAccountToken).toBe(false);
    expect(findOne<IServiceAccount>(render(), 'ServiceAccount').automountServiceAccountToken).toBe(false);
  });
});

describe('termination', () => {
  it('pauses with the native preStop sleep, no command (the image has no shell)', () => {
    const preStop = apiContainer().lifecycle?.preStop;
    expect(preStop?.sleep?.seconds).toBe(5);
    expect(preStop?.exec).toBeUndefined();
  });

  it.each(valueSets)('allows more time than preStop + DRAIN_DELAY_MS + SHUTDOWN_TIMEOUT_MS with %s', (_name, options) => {
    const env = envConfigMap(options);
    const preStopMs = (apiContainer(options).lifecycle?.preStop?.sleep?.seconds ?? 0) * 1000;
    const planned = preStopMs + Number(env.DRAIN_DELAY_MS) + Number(env.SHUTDOWN_TIMEOUT_MS);
    expect(Number.isFinite(planned)).toBe(true);
    expect((podSpec(options).terminationGracePeriodSeconds ?? 30) * 1000).toBeGreaterThan(planned);
  });

  it('follows the drain settings: longer shutdown needs a longer grace period, and gets it', () => {
    const options = { set: ['config.shutdownTimeoutMs=50000', 'lifecycle.terminationGracePeriodSeconds=70'] };
    expect(envConfigMap(options).SHUTDOWN_TIMEOUT_MS).toBe('50000');
    expect(podSpec(options).terminationGracePeriodSeconds).toBe(70);
  });

  it('leaves the preStop hook out when its pause is 0', () => {
    expect(apiContainer({ set: ['lifecycle.preStopSleepSeconds=0'] }).lifecycle).toBeUndefined();
  });
});

describe('API version deprecations (API_VERSION_DEPRECATIONS)', () => {
  const deprecations = {
    '2026-11-21': { deprecatedAt: '2027-01-01T00:00:00Z', sunsetAt: '2028-01-01T00:00:00Z', link: 'https://partners.example.com/guide' },
  };

  it('are not set by default: no version is deprecated', () => {
    expect(envConfigMap().API_VERSION_DEPRECATIONS).toBeUndefined();
  });

  it('reach the service as the JSON it reads, unchanged', () => {
    const env = envConfigMap({ setJson: [`config.apiVersionDeprecations=${JSON.stringify(deprecations)}`] });
    expect(JSON.parse(env.API_VERSION_DEPRECATIONS ?? 'null')).toEqual(deprecations);
  });
});

describe('rollout', () => {
  it('never lowers capacity during a rolling update and keeps its history bounded', () => {
    const spec = deployment().spec;
    expect(spec?.strategy?.type).toBe('RollingUpdate');
    expect(spec?.strategy?.rollingUpdate?.maxUnavailable).toBe(0);
    expect(spec?.minReadySeconds).toBeGreaterThan(0);
    expect(spec?.revisionHistoryLimit).toBeGreaterThan(0);
    expect(spec?.progressDeadlineSeconds).toBeGreaterThan(spec?.minReadySeconds ?? 0);
  });

  it('sets replicas from replicaCount, and leaves them to the HPA when autoscaling is on', () => {
    expect(deployment().spec?.replicas).toBe(2);
    expect(deployment({ set: ['replicaCount=4'] }).spec?.replicas).toBe(4);
    expect(deployment({ values: ['ci/everything-values.yaml'] }).spec).not.toHaveProperty('replicas');
  });

  it('selects its own pods only, with labels that the pods carry', () => {
    const d = deployment();
    const selector = d.spec?.selector.matchLabels ?? {};
    expect(selector).toEqual({
      'app.kubernetes.io/name': 'partner-agent-status',
      'app.kubernetes.io/instance': 'pas',
      'app.kubernetes.io/component': 'api',
    });
    expect(d.spec?.template.metadata?.labels).toMatchObject(selector);
  });

  it('spreads the pods over zones and nodes, per revision', () => {
    const constraints = podSpec().topologySpreadConstraints ?? [];
    expect(constraints.map((c) => c.topologyKey)).toEqual(['topology.kubernetes.io/zone', 'kubernetes.io/hostname']);
    const podLabels = deployment().spec?.template.metadata?.labels ?? {};
    for (const constraint of constraints) {
      expect(podLabels).toMatchObject(constraint.labelSelector?.matchLabels ?? { missing: 'labelSelector' });
      expect(constraint.matchLabelKeys).toEqual(['pod-template-hash']);
    }
  });

  it('sets requests and limits for CPU and memory', () => {
    const resources = apiContainer().resources;
    expect(Object.keys(resources?.requests ?? {}).sort()).toEqual(['cpu', 'memory']);
    expect(Object.keys(resources?.limits ?? {}).sort()).toEqual(['cpu', 'memory']);
  });

  it('starts the service with its telemetry preload', () => {
    expect(apiContainer().args).toEqual(['--import', './dist/telemetry.js', 'dist/main.js']);
  });

  it('uses the image tag from appVersion by default and a digest when one is given', () => {
    expect(apiContainer().image).toBe('ghcr.io/example/partner-agent-status:0.1.0');
    expect(apiContainer({ values: ['ci/everything-values.yaml'] }).image).toMatch(
      /^registry\.example\.com\/partner-agent-status@sha256:[0-9a-f]{64}$/,
    );
  });
});

describe('config checksum on the pod template', () => {
  const checksum = (options: RenderOptions = {}): string | undefined =>
    deployment(options).spec?.template.metadata?.annotations?.['checksum/config'];

  it('is a sha256 of the environment ConfigMap', () => {
    expect(checksum()).toMatch(/^[0-9a-f]{64}$/);
  });

  it('changes when the environment changes, so the pods roll', () => {
    expect(checksum({ set: ['config.logLevel=debug'] })).not.toBe(checksum());
    expect(checksum({ set: ['breaker.volumeThreshold=20'] })).not.toBe(checksum());
  });

  it('does not change with the partner-keys Secret settings: the service reloads keys without a restart', () => {
    expect(checksum({ set: ['partnerKeys.externalSecret.refreshInterval=5m'] })).toBe(checksum());
    expect(checksum({ set: ['partnerKeys.externalSecret.remoteRef.key=other/partner-keys'] })).toBe(checksum());
    const annotations = Object.keys(deployment().spec?.template.metadata?.annotations ?? {});
    expect(annotations.filter((a) => a.startsWith('checksum/'))).toEqual(['checksum/config']);
  });
});
