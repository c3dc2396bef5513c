import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { IPrometheusRule, IServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { load } from 'js-yaml';
import type { IDeployment } from 'kubernetes-models/apps/v1';
import type { IJob } from 'kubernetes-models/batch/v1';
import type { IConfigMap, IPod, IService } from 'kubernetes-models/v1';
import { describe, expect, it } from 'vitest';
import { chartDir, findAll, findOne, NAMESPACE, type RenderOptions, render } from './chart.js';

const everything = { values: ['ci/everything-values.yaml'] };

describe('ServiceMonitor', () => {
  it('is off by default', () => {
    expect(findAll(render(), 'ServiceMonitor')).toEqual([]);
  });

  it('scrapes /metrics on the metrics port of the Service', () => {
    const monitor = findOne<IServiceMonitor>(render(everything), 'ServiceMonitor');
    expect(monitor.spec.endpoints).toHaveLength(1);
    expect(monitor.spec.endpoints?.[0]).toMatchObject({ port: 'metrics', path: '/metrics', interval: '15s' });
    const service = findOne<IService>(render(everything), 'Service');
    expect(service.metadata?.labels).toMatchObject(monitor.spec.selector.matchLabels ?? { missing: 'selector' });
    expect(service.spec?.ports?.map((p) => p.name)).toContain('metrics');
    expect(monitor.spec.namespaceSelector?.matchNames).toEqual([NAMESPACE]);
    expect(monitor.metadata?.labels?.release).toBe('kube-prometheus-stack');
  });
});

describe('PrometheusRule', () => {
  it('carries the groups of the chart rule file unchanged', () => {
    const file = load(readFileSync(join(chartDir, 'rules', 'partner-agent-status.rules.yaml'), 'utf8')) as { groups: unknown[] };
    expect(file.groups.length).toBeGreaterThan(0);
    const rule = findOne<IPrometheusRule>(render(everything), 'PrometheusRule');
    expect(rule.spec.groups).toEqual(file.groups);
    expect(rule.metadata?.labels?.release).toBe('kube-prometheus-stack');
  });

  it('is off by default', () => {
    expect(findAll(render(), 'PrometheusRule')).toEqual([]);
  });
});

describe('Grafana dashboards', () => {
  const files = readdirSync(join(chartDir, 'dashboards'))
    .filter((f) => f.endsWith('.json'))
    .sort();
  const dashboards = (options: RenderOptions = everything): IConfigMap[] =>
    findAll<IConfigMap>(render(options), 'ConfigMap').filter((c) => c.metadata?.labels?.['app.kubernetes.io/component'] === 'dashboards');

  it('become one ConfigMap per JSON file, with the file as is, labelled for the sidecar', () => {
    expect(files.length).toBeGreaterThan(0);
    const maps = dashboards();
    expect(maps.flatMap((c) => Object.keys(c.data ?? {})).sort()).toEqual(files);
    for (const map of maps) {
      expect(map.metadata?.labels?.grafana_dashboard).toBe('1');
      expect(map.metadata?.namespace).toBe('monitoring');
      expect(map.metadata?.annotations?.grafana_folder).toBe('Partner API');
      for (const [file, content] of Object.entries(map.data ?? {})) {
        expect(content).toBe(readFileSync(join(chartDir, 'dashboards', file), 'utf8').replace(/\n$/, ''));
        expect(() => JSON.parse(content) as unknown).not.toThrow();
      }
    }
  });

  it('use the sidecar label from values', () => {
    const maps = dashboards({
      ...everything,
      set: ['dashboards.label.name=dashboards.example.com/grafana', 'dashboards.label.value=yes'],
    });
    expect(maps.length).toBeGreaterThan(0);
    for (const map of maps) expect(map.metadata?.labels?.['dashboards.example.com/grafana']).toBe('yes');
  });

  it('are off by default', () => {
    expect(dashboards({})).toEqual([]);
  });
});

describe('migration hook', () => {
  const job = (): IJob => findOne<IJob>(render(), 'Job');

  it('runs node dist/db/migrate-cli.js before install and upgrade', () => {
    expect(job().metadata?.annotations).toMatchObject({
      'helm.sh/hook': 'pre-install,pre-upgrade',
      'helm.sh/hook-delete-policy': 'before-hook-creation,hook-succeeded',
    });
    const container = job().spec?.template.spec?.containers[0];
    expect(container?.args).toEqual(['dist/db/migrate-cli.js']);
    expect(job().spec?.template.spec?.restartPolicy).toBe('Never');
    expect(job().spec?.activeDeadlineSeconds).toBeGreaterThan(0);
  });

  it('uses the service image and the same DATABASE_URL Secret as the service', () => {
    const container = job().spec?.template.spec?.containers[0];
    const api = findOne<IDeployment>(render(), 'Deployment').spec?.template.spec?.containers.find((c) => c.name === 'api');
    expect(container?.image).toBe(api?.image);
    const secretOf = (env: typeof api): unknown => env?.env?.find((e) => e.name === 'DATABASE_URL')?.valueFrom?.secretKeyRef;
    expect(secretOf(container)).toEqual(secretOf(api));
  });

  it('takes MIGRATION_DATABASE_URL from its own Secret when one is named (a direct connection behind a pooler)', () => {
    const envOf = (options: Parameters<typeof render>[0]) =>
      findOne<IJob>(render(options), 'Job').spec?.template.spec?.containers[0]?.env ?? [];
    expect(envOf({}).map((e) => e.name)).not.toContain('MIGRATION_DATABASE_URL');
    const env = envOf({ set: ['database.pooler=transaction', 'database.migrationUrlSecret.name=pas-database-direct'] });
    expect(env.find((e) => e.name === 'MIGRATION_DATABASE_URL')?.valueFrom?.secretKeyRef).toEqual({
      name: 'pas-database-direct',
      key: 'url',
    });
    // The service's own DATABASE_URL stays the pooler's.
    expect(env.find((e) => e.name === 'DATABASE_URL')?.valueFrom?.secretKeyRef).toEqual({
      name: 'partner-agent-status-database',
      key: 'url',
    });
  });

  it('does not depend on objects the chart creates later (the hook runs first)', () => {
    const spec = job().spec?.template.spec;
    expect(spec?.serviceAccountName).toBeUndefined();
    expect(spec?.containers[0]?.envFrom).toBeUndefined();
  });

  it('can be switched off', () => {
    expect(findAll(render({ set: ['migrations.enabled=false'] }), 'Job')).toEqual([]);
  });
});

describe('helm test pods', () => {
  const pods = (): IPod[] => findAll<IPod>(render(), 'Pod');
  const service = (): IService => findOne<IService>(render(), 'Service');
  const script = (pod: IPod): string => [...(pod.spec?.containers[0]?.command ?? []), ...(pod.spec?.containers[0]?.args ?? [])].join(' ');
  const envOf = (pod: IPod): string => (pod.spec?.containers[0]?.env ?? []).map((e) => `${e.name}=${e.value ?? ''}`).join(' ');

  it('are test hooks with a pinned curl image', () => {
    expect(pods()).toHaveLength(2);
    for (const pod of pods()) {
      expect(pod.metadata?.annotations?.['helm.sh/hook']).toBe('test');
      expect(pod.spec?.restartPolicy).toBe('Never');
      expect(pod.spec?.containers[0]?.image).toMatch(/^curlimages\/curl:8\.\d+\.\d+$/);
    }
  });

  it('expect 200 from GET /readyz on the Service http port', () => {
    const url = `http://${service().metadata?.name}.${NAMESPACE}.svc:8080/readyz`;
    const pod = pods().find((p) => script(p).includes(url));
    expect(pod).toBeDefined();
    expect(script(pod as IPod)).toContain('--fail');
  });

  it('expect 401 from POST /partner/agents/status without x-api-key', () => {
    const url = `http://${service().metadata?.name}.${NAMESPACE}.svc:8080/partner/agents/status`;
    const pod = pods().find((p) => envOf(p).includes(url));
    expect(pod).toBeDefined();
    const text = script(pod as IPod);
    expect(text).toContain('--request POST');
    expect(text).toContain('test "$status" = "401"');
    expect(text).not.toMatch(/(--header|-H)\s+['"]?x-api-key/i);
  });
});
