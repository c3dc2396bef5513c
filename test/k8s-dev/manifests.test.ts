// The kind dev environment (k8s-dev/) checked without a cluster: every manifest object against the
// Kubernetes schemas (kubernetes-models, through the chart tests' validateObject), the chart
// rendered with k8s-dev/values-dev.yaml and validated the same way, the kind cluster config by
// its structure (it is kind's own format, not a Kubernetes object), and the names the scripts,
// the manifests and the values share.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { load, loadAll } from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { findAll, findOne, lint, render, validateObject, type K8sObject } from '../chart/chart.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const devDir = join(root, 'k8s-dev');
const valuesDev = join(devDir, 'values-dev.yaml');
const manifestsDir = join(devDir, 'manifests');

function yamlFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return yamlFiles(path);
    return /\.ya?ml$/.test(entry.name) ? [relative(devDir, path)] : [];
  });
}

const manifestFiles = readdirSync(manifestsDir).filter((name) => /\.ya?ml$/.test(name)).sort();
const manifestObjects: Array<{ file: string; object: K8sObject }> = manifestFiles.flatMap((file) =>
  loadAll(readFileSync(join(manifestsDir, file), 'utf8'))
    .filter((doc) => doc !== null && doc !== undefined)
    .map((object) => ({ file, object: object as K8sObject })),
);

/** A setting of k8s-dev/lib.sh: `export NAME="value"` or `export NAME="${NAME:-value}"`. */
function libSetting(name: string): string {
  const text = readFileSync(join(devDir, 'lib.sh'), 'utf8');
  const match = new RegExp(`^export ${name}="(?:\\$\\{${name}:-)?([^"}]*)\\}?"$`, 'm').exec(text);
  if (!match) throw new Error(`k8s-dev/lib.sh does not set ${name}`);
  return match[1]!;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed YAML
type Json = any;
const values: Json = load(readFileSync(valuesDev, 'utf8'));

describe('k8s-dev YAML files', () => {
  it('are each checked by this file: the kind config, the chart values, or Kubernetes manifests', () => {
    const checked = ['kind-cluster.yaml', 'values-dev.yaml', ...manifestFiles.map((file) => `manifests/${file}`)].sort();
    expect(yamlFiles(devDir).sort()).toEqual(checked);
  });
});

describe('k8s-dev/manifests: every object matches its Kubernetes schema', () => {
  it('holds the three dependencies: PostgreSQL, Redis and the simulator, each a Deployment and a Service', () => {
    const names = manifestObjects.map(({ object }) => `${object.kind}/${object.metadata.name}`).sort();
    expect(names).toEqual(
      ['Deployment/postgres', 'Deployment/redis', 'Deployment/spend-simulator', 'Service/postgres', 'Service/redis', 'Service/spend-simulator'].sort(),
    );
  });

  it.each(manifestObjects.map(({ file, object }) => [`${file}: ${object.kind}/${object.metadata.name}`, object] as const))(
    '%s',
    (_name, object) => {
      validateObject(object);
      // Applied into the dev namespace by install.sh: no namespace of their own.
      expect(object.metadata.namespace).toBeUndefined();
    },
  );

  it('pins every image to a version (postgres 15, redis 7, the locally built service image)', () => {
    const images = findAll<Json>(manifestObjects.map(({ object }) => object), 'Deployment').flatMap((d) =>
      d.spec.template.spec.containers.map((c: Json) => c.image as string),
    );
    expect(images.sort()).toEqual([expect.stringMatching(/^partner-agent-status:dev$/), expect.stringMatching(/^postgres:15\.\d+$/), expect.stringMatching(/^redis:7\.\d+\.\d+$/)]);
  });

  it('runs the simulator from the service image, never pulled, as node dist/spend-simulator/main.js', () => {
    const simulator = manifestObjects.find(({ object }) => object.kind === 'Deployment' && object.metadata.name === 'spend-simulator')!.object as Json;
    const [container] = simulator.spec.template.spec.containers;
    expect(container.image).toBe(libSetting('IMAGE'));
    expect(container.imagePullPolicy).toBe('Never');
    expect(container.command).toBeUndefined(); // the image's entrypoint is node
    expect(container.args).toEqual(['dist/spend-simulator/main.js']);
  });

  it("gives every Service a Deployment whose pods it selects and a port it targets", () => {
    const objects = manifestObjects.map(({ object }) => object);
    for (const service of findAll<Json>(objects, 'Service')) {
      const deployment = findAll<Json>(objects, 'Deployment').find((d) =>
        Object.entries(service.spec.selector).every(([key, value]) => d.spec.template.metadata.labels[key] === value),
      );
      expect(deployment, `Service ${service.metadata.name} selects no Deployment`).toBeDefined();
      const portNames = deployment.spec.template.spec.containers.flatMap((c: Json) => (c.ports ?? []).map((p: Json) => p.name));
      for (const port of service.spec.ports) expect(portNames, `Service ${service.metadata.name}`).toContain(port.targetPort);
    }
  });
});

describe('the chart with k8s-dev/values-dev.yaml', () => {
  const objects = () => render({ values: [valuesDev] });

  it('passes helm lint --strict', () => {
    const result = lint({ values: [valuesDev] });
    expect(result.stderr + result.stdout).toContain('0 chart(s) failed');
    expect(result.status).toBe(0);
  });

  it('renders objects that all match their Kubernetes schemas', () => {
    expect(objects().length).toBeGreaterThan(0);
    for (const object of objects()) validateObject(object);
  });

  it('renders nothing kind cannot take: no ExternalSecret, no Prometheus Operator objects, no dashboards', () => {
    const kinds = new Set(objects().map((object) => object.kind));
    for (const kind of ['ExternalSecret', 'ServiceMonitor', 'PrometheusRule']) expect(kinds.has(kind), kind).toBe(false);
    expect(findAll(objects(), 'ConfigMap').filter((c) => c.metadata.labels?.['app.kubernetes.io/component'] === 'dashboards')).toEqual([]);
  });

  it('routes /partner/ only, through the nginx ingress class, for localhost', () => {
    const ingress = findOne<Json>(objects(), 'Ingress');
    expect(ingress.spec.ingressClassName).toBe('nginx');
    expect(ingress.spec.rules).toHaveLength(1);
    expect(ingress.spec.rules[0].host).toBe('localhost');
    expect(ingress.spec.rules[0].http.paths.map((p: Json) => p.path)).toEqual(['/partner/']);
  });

  it('runs the locally loaded image and mounts the partner-keys Secret that install.sh makes', () => {
    const deployment = findOne<Json>(objects(), 'Deployment');
    const [container] = deployment.spec.template.spec.containers;
    expect(container.image).toBe(libSetting('IMAGE'));
    expect(container.imagePullPolicy).toBe('Never');
    const keysVolume = deployment.spec.template.spec.volumes.find((v: Json) => v.name === 'partner-keys');
    expect(keysVolume.secret.secretName).toBe(libSetting('PARTNER_KEYS_SECRET'));
    expect(values.partnerKeys.existingSecret).toBe(libSetting('PARTNER_KEYS_SECRET'));
  });

  it('takes DATABASE_URL and REDIS_URL from the Secrets install.sh makes', () => {
    const env: Json[] = findOne<Json>(objects(), 'Deployment').spec.template.spec.containers[0].env;
    const secretOf = (name: string) => env.find((e) => e.name === name)?.valueFrom?.secretKeyRef;
    expect(secretOf('DATABASE_URL')).toEqual({ name: libSetting('DATABASE_SECRET'), key: 'url' });
    expect(secretOf('REDIS_URL')).toEqual({ name: libSetting('REDIS_SECRET'), key: 'url' });
    const install = readFileSync(join(devDir, 'install.sh'), 'utf8');
    expect(install).toMatch(/create secret generic "\$DATABASE_SECRET"[\s\S]*--from-literal=url=/);
    expect(install).toMatch(/create secret generic "\$REDIS_SECRET" --from-literal=url=/);
  });

  it('points SPEND_MANAGEMENT_URL at the simulator Service, and REDIS_KEY_PREFIX at what run-e2e.sh tells the seeder', () => {
    const config = findOne<Json>(objects(), 'ConfigMap').data;
    const url = new URL(config.SPEND_MANAGEMENT_URL);
    const simulatorService = manifestObjects.find(({ object }) => object.kind === 'Service' && object.metadata.name === 'spend-simulator')!.object as Json;
    expect(url.hostname).toBe(simulatorService.metadata.name);
    expect(Number(url.port)).toBe(simulatorService.spec.ports[0].port);
    expect(config.REDIS_KEY_PREFIX).toBe(libSetting('REDIS_KEY_PREFIX'));
  });
});

describe('k8s-dev/kind-cluster.yaml (kind\'s format, checked by structure)', () => {
  const cluster: Json = load(readFileSync(join(devDir, 'kind-cluster.yaml'), 'utf8'));

  it('is a kind v1alpha4 Cluster with one control-plane node', () => {
    expect(cluster).toMatchObject({ kind: 'Cluster', apiVersion: 'kind.x-k8s.io/v1alpha4' });
    expect(cluster.nodes).toHaveLength(1);
    expect(cluster.nodes[0].role).toBe('control-plane');
    const allowed = new Set(['kind', 'apiVersion', 'name', 'nodes']);
    expect(Object.keys(cluster).filter((key) => !allowed.has(key))).toEqual([]);
  });

  it('labels the node ingress-ready=true, where ingress-nginx\'s kind manifest schedules its controller', () => {
    expect(cluster.nodes[0].labels).toEqual({ 'ingress-ready': 'true' });
  });

  it('maps the node\'s ports 80 and 443 to this machine, 80 to the port run-e2e.sh calls', () => {
    const mappings = cluster.nodes[0].extraPortMappings as Json[];
    const hostPortOf = (containerPort: number) => mappings.find((m) => m.containerPort === containerPort)?.hostPort;
    expect(hostPortOf(80)).toBe(Number(libSetting('INGRESS_HTTP_PORT')));
    expect(hostPortOf(443)).toBe(8443);
    for (const mapping of mappings) expect(mapping.protocol).toBe('TCP');
  });

  it('pins a node image of Kubernetes 1.30 or later (the chart\'s kubeVersion)', () => {
    const match = /^kindest\/node:v1\.(\d+)\.\d+(@sha256:[a-f0-9]{64})?$/.exec(cluster.nodes[0].image);
    expect(match, cluster.nodes[0].image).not.toBeNull();
    expect(Number(match![1])).toBeGreaterThanOrEqual(30);
  });

  it('is the cluster the scripts use', () => {
    expect(cluster.name).toBe(libSetting('CLUSTER_NAME'));
  });
});

describe('k8s-dev/run-e2e.sh', () => {
  const script = readFileSync(join(devDir, 'run-e2e.sh'), 'utf8');

  it('runs the suite through the ingress with every seeding variable set', () => {
    expect(script).toContain('export BASE_URL="http://localhost:${INGRESS_HTTP_PORT}"');
    expect(script).toContain('export E2E_VIA_INGRESS=1');
    for (const name of ['E2E_DATABASE_URL', 'E2E_REDIS_URL', 'E2E_REDIS_KEY_PREFIX', 'E2E_SIMULATOR_URL', 'E2E_PARTNER_KEYS_SECRET', 'E2E_KUBE_NAMESPACE']) {
      expect(script, name).toMatch(new RegExp(`^export ${name}=`, 'm'));
    }
    expect(script).toMatch(/^npm run test:e2e/m);
  });
});
