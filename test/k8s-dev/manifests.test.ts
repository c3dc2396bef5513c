// The kind dev environment (k8s-dev/) checked without a cluster: every manifest object against the
// Kubernetes and Gateway API schemas (kubernetes-models, through the chart tests' validateObject),
// Envoy Gateway's own objects and the kind cluster config by their structure (no schema package
// exists for them), the chart rendered with k8s-dev/values-dev.yaml under both Helm majors and
// validated the same way, and the names and ports the scripts, the manifests and the values share.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { load, loadAll } from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { findAll, findOne, helms, type K8sObject, lint, render, validateObject } from '../chart/chart.js';

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

const manifestFiles = readdirSync(manifestsDir)
  .filter((name) => /\.ya?ml$/.test(name))
  .sort();
const gatewayObjects = loadAll(readFileSync(join(devDir, 'gateway', 'gateway.yaml'), 'utf8')).filter(
  (doc) => doc !== null && doc !== undefined,
) as K8sObject[];
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

// biome-ignore lint/suspicious/noExplicitAny: parsed YAML of several shapes, read field by field in assertions
type Json = any;
const values: Json = load(readFileSync(valuesDev, 'utf8'));

describe('k8s-dev YAML files', () => {
  it('are each checked by this file: the kind config, the chart values, or Kubernetes manifests', () => {
    const checked = [
      'kind-cluster.yaml',
      'values-dev.yaml',
      'gateway/gateway.yaml',
      ...manifestFiles.map((file) => `manifests/${file}`),
    ].sort();
    expect(yamlFiles(devDir).sort()).toEqual(checked);
  });
});

describe('k8s-dev/manifests: every object matches its Kubernetes schema', () => {
  it('holds the three dependencies: PostgreSQL, Redis and the simulator, each a Deployment and a Service', () => {
    const names = manifestObjects.map(({ object }) => `${object.kind}/${object.metadata.name}`).sort();
    expect(names).toEqual(
      [
        'Deployment/postgres',
        'Deployment/redis',
        'Deployment/spend-simulator',
        'Service/postgres',
        'Service/redis',
        'Service/spend-simulator',
      ].sort(),
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
    const images = findAll<Json>(
      manifestObjects.map(({ object }) => object),
      'Deployment',
    ).flatMap((d) => d.spec.template.spec.containers.map((c: Json) => c.image as string));
    expect(images.sort()).toEqual([
      expect.stringMatching(/^partner-agent-status:dev$/),
      expect.stringMatching(/^postgres:15\.\d+$/),
      expect.stringMatching(/^redis:7\.\d+\.\d+$/),
    ]);
  });

  it('runs the simulator from the service image, never pulled, as node dist/spend-simulator/main.js', () => {
    const simulator = manifestObjects.find(({ object }) => object.kind === 'Deployment' && object.metadata.name === 'spend-simulator')!
      .object as Json;
    const [container] = simulator.spec.template.spec.containers;
    expect(container.image).toBe(libSetting('IMAGE'));
    expect(container.imagePullPolicy).toBe('Never');
    expect(container.command).toBeUndefined(); // the image's entrypoint is node
    expect(container.args).toEqual(['dist/spend-simulator/main.js']);
  });

  it('gives every Service a Deployment whose pods it selects and a port it targets', () => {
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

  it.each(helms)('passes helm lint --strict with %s', (_helm, binary) => {
    const result = lint({ values: [valuesDev], helm: binary.major, kubeVersion: '1.35.0' });
    expect(result.stderr + result.stdout).toContain('0 chart(s) failed');
    expect(result.status).toBe(0);
  });

  it.each(helms)('renders objects that all match their Kubernetes schemas with %s', (_helm, binary) => {
    const rendered = render({ values: [valuesDev], helm: binary.major, kubeVersion: '1.35.0' });
    expect(rendered.length).toBeGreaterThan(0);
    for (const object of rendered) validateObject(object);
  });

  it('renders nothing kind cannot take: no ExternalSecret, no Prometheus Operator objects, no dashboards', () => {
    const kinds = new Set(objects().map((object) => object.kind));
    for (const kind of ['ExternalSecret', 'ServiceMonitor', 'PrometheusRule']) expect(kinds.has(kind), kind).toBe(false);
    expect(findAll(objects(), 'ConfigMap').filter((c) => c.metadata.labels?.['app.kubernetes.io/component'] === 'dashboards')).toEqual([]);
  });

  it('routes /partner/ only, through an HTTPRoute on the dev Gateway, and makes no Ingress', () => {
    expect(findAll(objects(), 'Ingress')).toEqual([]);
    const route = findOne<Json>(objects(), 'HTTPRoute');
    const gateway = gatewayObjects.find((o) => o.kind === 'Gateway') as Json;
    expect(route.spec.parentRefs).toEqual([
      {
        group: 'gateway.networking.k8s.io',
        kind: 'Gateway',
        name: gateway.metadata.name,
        namespace: gateway.metadata.namespace,
        sectionName: gateway.spec.listeners[0].name,
      },
    ]);
    // The events feed's streams first (a rule of their own, with the stream's timeouts), then the rest of /partner/.
    expect(route.spec.rules.map((rule: Json) => rule.matches)).toEqual([
      [{ path: { type: 'Exact', value: '/partner/events' } }],
      [{ path: { type: 'PathPrefix', value: '/partner/' } }],
    ]);
    // Every host: the suite's requests carry Host: localhost:<port>.
    expect(route.spec.hostnames).toBeUndefined();
  });

  it("puts Envoy Gateway's per-client limit on the dev route in shadow mode only: the e2e suite comes from one address", () => {
    const policy = findOne<Json>(objects(), 'BackendTrafficPolicy');
    expect(policy.spec.targetRefs).toEqual([
      { group: 'gateway.networking.k8s.io', kind: 'HTTPRoute', name: findOne<Json>(objects(), 'HTTPRoute').metadata.name },
    ]);
    for (const rule of policy.spec.rateLimit.local.rules) expect(rule.shadowMode).toBe(true);
  });

  it('admits the Envoy pods of the dev Gateway through the NetworkPolicy', () => {
    const policy = findOne<Json>(objects(), 'NetworkPolicy');
    expect(policy.spec.ingress[0].from).toContainEqual({
      namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': libSetting('GATEWAY_NAMESPACE') } },
    });
  });

  it("lets the service out to exactly the dev dependencies' pods (PostgreSQL, Redis, the simulator) on their Services' ports", () => {
    const policy = findOne<Json>(objects(), 'NetworkPolicy');
    const deployments = findAll<Json>(
      manifestObjects.map(({ object }) => object),
      'Deployment',
    );
    for (const name of ['postgres', 'redis', 'spend-simulator']) {
      const service = manifestObjects.find(({ object }) => object.kind === 'Service' && object.metadata.name === name)!.object as Json;
      const podLabels = deployments.find((d) => d.metadata.name === name).spec.template.metadata.labels;
      const rule = policy.spec.egress.find((r: Json) => r.ports.some((p: Json) => p.port === service.spec.ports[0].port && r.to));
      expect(rule, `no egress rule for ${name}`).toBeDefined();
      const selectors = rule.to.map((peer: Json) => peer.podSelector?.matchLabels);
      expect(selectors.some((labels: Json) => labels && Object.entries(labels).every(([k, v]) => podLabels[k] === v))).toBe(true);
      // Pod selectors only: nothing outside the dev namespace.
      for (const peer of rule.to) expect(Object.keys(peer)).toEqual(['podSelector']);
    }
  });

  it('sets a rate limit the rate-limit spec reaches at once and no other spec reaches in a whole run', () => {
    const config = findOne<Json>(objects(), 'ConfigMap').data;
    expect(config).toMatchObject({ RATE_LIMIT_MAX: '200', RATE_LIMIT_WINDOW_MS: '10000' });
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
    const simulatorService = manifestObjects.find(({ object }) => object.kind === 'Service' && object.metadata.name === 'spend-simulator')!
      .object as Json;
    expect(url.hostname).toBe(simulatorService.metadata.name);
    expect(Number(url.port)).toBe(simulatorService.spec.ports[0].port);
    expect(config.REDIS_KEY_PREFIX).toBe(libSetting('REDIS_KEY_PREFIX'));
  });
});

describe("k8s-dev/kind-cluster.yaml (kind's format, checked by structure)", () => {
  const cluster: Json = load(readFileSync(join(devDir, 'kind-cluster.yaml'), 'utf8'));

  it('is a kind v1alpha4 Cluster with one control-plane node', () => {
    expect(cluster).toMatchObject({ kind: 'Cluster', apiVersion: 'kind.x-k8s.io/v1alpha4' });
    expect(cluster.nodes).toHaveLength(1);
    expect(cluster.nodes[0].role).toBe('control-plane');
    const allowed = new Set(['kind', 'apiVersion', 'name', 'nodes']);
    expect(Object.keys(cluster).filter((key) => !allowed.has(key))).toEqual([]);
  });

  it("publishes the dev Gateway's node port on this machine, at the port run-e2e.sh calls, and nothing else", () => {
    const mappings = cluster.nodes[0].extraPortMappings as Json[];
    const proxy = gatewayObjects.find((o) => o.kind === 'EnvoyProxy') as Json;
    const nodePort = proxy.spec.provider.kubernetes.envoyService.patch.value.spec.ports[0].nodePort;
    expect(mappings).toEqual([
      { containerPort: nodePort, hostPort: Number(libSetting('GATEWAY_HTTP_PORT')), listenAddress: '127.0.0.1', protocol: 'TCP' },
    ]);
    expect(cluster.nodes[0].labels).toBeUndefined();
  });

  it('pins a node image by digest, of Kubernetes 1.33 to 1.36 (Envoy Gateway 1.9) and so 1.30 or later (the chart)', () => {
    const match = /^kindest\/node:v1\.(\d+)\.\d+@sha256:[a-f0-9]{64}$/.exec(cluster.nodes[0].image);
    expect(match, cluster.nodes[0].image).not.toBeNull();
    expect(Number(match![1])).toBeGreaterThanOrEqual(33);
    expect(Number(match![1])).toBeLessThanOrEqual(36);
  });

  it('is the cluster the scripts use', () => {
    expect(cluster.name).toBe(libSetting('CLUSTER_NAME'));
  });
});

describe('k8s-dev/gateway/gateway.yaml: the dev Gateway', () => {
  const byKind = (kind: string): Json => {
    const found = gatewayObjects.filter((o) => o.kind === kind);
    expect(found, kind).toHaveLength(1);
    return found[0];
  };

  it('holds a GatewayClass, a Gateway, and the Envoy Gateway settings they use', () => {
    expect(gatewayObjects.map((o) => `${o.apiVersion}/${o.kind}`).sort()).toEqual(
      [
        'gateway.envoyproxy.io/v1alpha1/ClientTrafficPolicy',
        'gateway.envoyproxy.io/v1alpha1/EnvoyProxy',
        'gateway.networking.k8s.io/v1/Gateway',
        'gateway.networking.k8s.io/v1/GatewayClass',
      ].sort(),
    );
  });

  it.each(
    gatewayObjects
      .filter((o) => o.apiVersion.startsWith('gateway.networking.k8s.io/'))
      .map((o) => [`${o.kind}/${o.metadata.name}`, o] as const),
  )('%s matches its Gateway API schema', (_name, object) => validateObject(object));

  it('is the Gateway the scripts wait for, run by Envoy Gateway, with the EnvoyProxy settings', () => {
    const gateway = byKind('Gateway');
    expect(gateway.metadata).toMatchObject({ name: libSetting('GATEWAY_NAME'), namespace: libSetting('GATEWAY_NAMESPACE') });
    expect(byKind('GatewayClass').spec.controllerName).toBe('gateway.envoyproxy.io/gatewayclass-controller');
    expect(gateway.spec.gatewayClassName).toBe(byKind('GatewayClass').metadata.name);
    const proxy = byKind('EnvoyProxy');
    expect(proxy.metadata.namespace).toBe(gateway.metadata.namespace);
    expect(gateway.spec.infrastructure.parametersRef).toEqual({
      group: 'gateway.envoyproxy.io',
      kind: 'EnvoyProxy',
      name: proxy.metadata.name,
    });
  });

  it('exposes the HTTP listener on a NodePort whose Service port is the listener port', () => {
    const [listener] = byKind('Gateway').spec.listeners;
    expect(listener).toMatchObject({ protocol: 'HTTP', port: 80, allowedRoutes: { namespaces: { from: 'All' } } });
    const service = byKind('EnvoyProxy').spec.provider.kubernetes.envoyService;
    expect(service.type).toBe('NodePort');
    expect(service.patch).toMatchObject({ type: 'StrategicMerge', value: { spec: { ports: [{ port: listener.port }] } } });
    expect(service.patch.value.spec.ports[0].nodePort).toBeGreaterThanOrEqual(30000);
    expect(service.patch.value.spec.ports[0].nodePort).toBeLessThanOrEqual(32767);
  });

  it("keeps the caller's x-request-id (Envoy Gateway replaces it by default), making one only when there is none", () => {
    const policy = byKind('ClientTrafficPolicy');
    expect(policy.spec).toEqual({
      targetRefs: [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: byKind('Gateway').metadata.name }],
      headers: { requestID: 'PreserveOrGenerate' },
    });
  });
});

describe('k8s-dev/create-cluster.sh and lib.sh', () => {
  const script = readFileSync(join(devDir, 'create-cluster.sh'), 'utf8');

  it('pins the Gateway API CRDs and Envoy Gateway to exact releases', () => {
    expect(libSetting('GATEWAY_API_VERSION')).toMatch(/^v1\.\d+\.\d+$/);
    expect(libSetting('ENVOY_GATEWAY_VERSION')).toMatch(/^v1\.\d+\.\d+$/);
    expect(script).toContain('releases/download/${GATEWAY_API_VERSION}/standard-install.yaml');
    expect(script).toMatch(/oci:\/\/docker\.io\/envoyproxy\/gateway-crds-helm --version "\$ENVOY_GATEWAY_VERSION"/);
    expect(script).toMatch(/oci:\/\/docker\.io\/envoyproxy\/gateway-helm --version "\$ENVOY_GATEWAY_VERSION"/);
    // One owner for the Gateway API CRDs: Envoy Gateway's chart must not install its own.
    expect(script).toContain('--set crds.enabled=false');
    expect(script).toContain('--set crds.gatewayAPI.enabled=false');
  });

  it('applies the dev Gateway and waits until it is programmed', () => {
    expect(script).toContain('--filename k8s-dev/gateway/gateway.yaml');
    expect(script).toMatch(/wait "gateway\/\$\{GATEWAY_NAME\}" --for=condition=Programmed/);
    expect(script).not.toMatch(/ingress-nginx\/|INGRESS_NGINX/);
  });
});

describe('k8s-dev/run-e2e.sh', () => {
  const script = readFileSync(join(devDir, 'run-e2e.sh'), 'utf8');

  it('runs the suite through the Gateway with every seeding variable set', () => {
    expect(script).toContain('export BASE_URL="http://localhost:${GATEWAY_HTTP_PORT}"');
    expect(script).toContain('export E2E_VIA_INGRESS=1');
    for (const name of [
      'E2E_DATABASE_URL',
      'E2E_REDIS_URL',
      'E2E_REDIS_KEY_PREFIX',
      'E2E_SIMULATOR_URL',
      'E2E_PARTNER_KEYS_SECRET',
      'E2E_KUBE_NAMESPACE',
    ]) {
      expect(script, name).toMatch(new RegExp(`^export ${name}=`, 'm'));
    }
    expect(script).toMatch(/^npm run test:e2e/m);
  });
});
