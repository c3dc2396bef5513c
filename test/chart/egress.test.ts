// The NetworkPolicy's egress names its destinations (issue 18, item 8): every rule has peers, a
// rule that would reach any destination is refused unless networkPolicy.egress.allowAnyDestination
// says so, and the AWS rule exists only where the service calls AWS itself. Under both Helm majors.
import type { INetworkPolicy, INetworkPolicyEgressRule, INetworkPolicyPeer } from 'kubernetes-models/networking.k8s.io/v1';
import { describe, expect, it } from 'vitest';
import { findAll, findOne, helms, type K8sObject, type RenderOptions, render, renderError, validateObject } from './chart.js';

const secretsManager = ['partnerKeys.mode=secretsManager', 'partnerKeys.secretsManager.secretId=partner-keys'];
const vpcEndpoints = 'networkPolicy.egress.aws.to=[{"ipBlock":{"cidr":"10.20.128.0/24"}}]';
const privateRanges: INetworkPolicyPeer[] = [
  { ipBlock: { cidr: '10.0.0.0/8' } },
  { ipBlock: { cidr: '172.16.0.0/12' } },
  { ipBlock: { cidr: '192.168.0.0/16' } },
];
const kubeDns: INetworkPolicyPeer = {
  namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } },
  podSelector: { matchLabels: { 'k8s-app': 'kube-dns' } },
};

const ports = (rule: INetworkPolicyEgressRule): string =>
  (rule.ports ?? []).map((p) => `${String(p.port)}/${p.protocol ?? 'TCP'}`).join(',');

describe.each(helms)('%s', (_helm, binary) => {
  const as = (options: RenderOptions): RenderOptions => ({ ...options, helm: binary.major });
  const egress = (options: RenderOptions = {}): INetworkPolicyEgressRule[] => {
    const policy = findOne<INetworkPolicy>(render(as(options)), 'NetworkPolicy');
    validateObject(policy as unknown as K8sObject);
    return policy.spec?.egress ?? [];
  };
  /** The rule for one port list, e.g. '5432/TCP'; undefined when there is none. */
  const ruleFor = (options: RenderOptions, portList: string): INetworkPolicyEgressRule | undefined =>
    egress(options).find((rule) => ports(rule) === portList);
  const refused = (options: RenderOptions): string => renderError(as(options));

  describe('NetworkPolicy egress with the default values (file mode)', () => {
    it('lets out DNS, PostgreSQL, Redis and spend management, and nothing on 443: file mode makes no AWS call', () => {
      expect(egress().map(ports)).toEqual(['53/UDP,53/TCP', '5432/TCP', '6379/TCP', '8080/TCP']);
    });

    it('names a destination in every rule, and none is a whole address family', () => {
      for (const rule of egress()) {
        expect(rule.to?.length, `${ports(rule)} without peers would reach any destination`).toBeGreaterThan(0);
        for (const peer of rule.to ?? []) expect(peer.ipBlock?.cidr ?? '').not.toMatch(/\/0$/);
      }
    });

    it('sends DNS to kube-dns, and PostgreSQL and Redis to the private address ranges only, never the internet', () => {
      expect(ruleFor({}, '53/UDP,53/TCP')?.to).toEqual([kubeDns]);
      expect(ruleFor({}, '5432/TCP')?.to).toEqual(privateRanges);
      expect(ruleFor({}, '6379/TCP')?.to).toEqual(privateRanges);
    });

    it('sends spend management to the namespace its in-cluster URL names (spend-management.spend-management.svc...)', () => {
      expect(ruleFor({}, '8080/TCP')?.to).toEqual([
        { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'spend-management' } } },
      ]);
    });
  });

  describe('the AWS rule (443) exists only in Secrets Manager mode', () => {
    it('is left out in file mode even when its peers are given', () => {
      expect(ruleFor({ setJson: [vpcEndpoints] }, '443/TCP')).toBeUndefined();
    });

    it('goes to the peers given in Secrets Manager mode', () => {
      expect(ruleFor({ set: secretsManager, setJson: [vpcEndpoints] }, '443/TCP')?.to).toEqual([{ ipBlock: { cidr: '10.20.128.0/24' } }]);
      expect(ruleFor({ values: ['ci/secrets-manager-values.yaml'] }, '443/TCP')?.to).toEqual([
        { ipBlock: { cidr: '10.20.128.0/24' } },
        { ipBlock: { cidr: '10.20.129.0/24' } },
      ]);
    });

    it('is refused without peers in Secrets Manager mode, naming the value to set', () => {
      expect(refused({ set: secretsManager })).toMatch(
        /networkPolicy\.egress\.aws\.to is empty: the NetworkPolicy would allow TCP 443 to any destination.*allowAnyDestination=true/,
      );
    });
  });

  describe('egress to any destination is refused unless allowed explicitly', () => {
    const cases: Array<[string, RenderOptions, RegExp]> = [
      [
        'PostgreSQL without peers',
        { setJson: ['networkPolicy.egress.postgres.to=[]'] },
        /networkPolicy\.egress\.postgres\.to is empty.*TCP 5432/,
      ],
      ['Redis without peers', { setJson: ['networkPolicy.egress.redis.to=[]'] }, /networkPolicy\.egress\.redis\.to is empty.*TCP 6379/],
      [
        'PostgreSQL to 0.0.0.0/0',
        { setJson: ['networkPolicy.egress.postgres.to=[{"ipBlock":{"cidr":"0.0.0.0/0"}}]'] },
        /networkPolicy\.egress\.postgres\.to has ipBlock 0\.0\.0\.0\/0, which is any destination/,
      ],
      [
        'AWS to ::/0 in Secrets Manager mode',
        { set: secretsManager, setJson: ['networkPolicy.egress.aws.to=[{"ipBlock":{"cidr":"::/0"}}]'] },
        /networkPolicy\.egress\.aws\.to has ipBlock ::\/0/,
      ],
      [
        'AWS to 0.0.0.0/0 except the metadata address',
        {
          set: secretsManager,
          setJson: ['networkPolicy.egress.aws.to=[{"ipBlock":{"cidr":"0.0.0.0/0","except":["169.254.169.254/32"]}}]'],
        },
        /networkPolicy\.egress\.aws\.to has ipBlock 0\.0\.0\.0\/0/,
      ],
      [
        'spend management at an external host name without peers',
        { set: ['spendManagement.url=https://spend.example.com'] },
        /networkPolicy\.egress\.spendManagement\.to is empty.*TCP 443/,
      ],
      [
        'the trace collector at an external host name without peers',
        { set: ['otel.enabled=true', 'otel.exporterOtlpEndpoint=https://otel.example.com'] },
        /networkPolicy\.egress\.otelCollector\.to is empty.*TCP 443/,
      ],
      ['DNS without peers', { setJson: ['networkPolicy.egress.dns.to=[]'] }, /networkPolicy\.egress\.dns\.to is empty.*DNS \(53\)/],
      [
        'an extra rule without peers',
        { setJson: ['networkPolicy.extraEgress=[{"ports":[{"port":9000,"protocol":"TCP"}]}]'] },
        /networkPolicy\.extraEgress\[0\]\.to is empty/,
      ],
    ];

    it.each(cases)('refuses %s', (_name, options, message) => {
      const stderr = refused(options);
      expect(stderr).toMatch(message);
      expect(stderr).toContain('networkPolicy.egress.allowAnyDestination=true');
    });

    it.each(cases)('renders %s with allowAnyDestination=true, as asked', (_name, options) => {
      expect(() => egress({ ...options, set: [...(options.set ?? []), 'networkPolicy.egress.allowAnyDestination=true'] })).not.toThrow();
    });

    it('leaves `to` out of a rule allowed to reach anything (Kubernetes: any destination on its ports)', () => {
      const open = { set: ['networkPolicy.egress.allowAnyDestination=true'], setJson: ['networkPolicy.egress.postgres.to=[]'] };
      expect(ruleFor(open, '5432/TCP')).toEqual({ ports: [{ port: 5432, protocol: 'TCP' }] });
    });

    it('does not check anything while the NetworkPolicy is off', () => {
      expect(
        findAll(render(as({ set: ['networkPolicy.enabled=false'], setJson: ['networkPolicy.egress.postgres.to=[]'] })), 'NetworkPolicy'),
      ).toEqual([]);
    });
  });

  describe('spend management and the trace collector: destinations derived from their URLs', () => {
    const spend = (url: string): INetworkPolicyEgressRule | undefined => egress({ set: [`spendManagement.url=${url}`] })[3];

    it('a Service in another namespace: that namespace', () => {
      expect(spend('http://spend.billing.svc.cluster.local:9000')?.to).toEqual([
        { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'billing' } } },
      ]);
      expect(spend('https://spend.billing.svc')?.to).toEqual([
        { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'billing' } } },
      ]);
    });

    it('a bare Service name: the pods of the release namespace', () => {
      expect(spend('http://spend-simulator:8080')?.to).toEqual([{ podSelector: {} }]);
    });

    it('an IP address: that address alone', () => {
      expect(spend('http://10.1.2.3:8080')?.to).toEqual([{ ipBlock: { cidr: '10.1.2.3/32' } }]);
    });

    it('peers given in values win over the derived ones, and ports over the URL port', () => {
      const rule = egress({
        set: ['spendManagement.url=https://spend.example.com:8443/api', 'networkPolicy.egress.spendManagement.ports={9443}'],
        setJson: ['networkPolicy.egress.spendManagement.to=[{"ipBlock":{"cidr":"10.40.0.0/16"}}]'],
      })[3];
      expect(rule).toEqual({ ports: [{ port: 9443, protocol: 'TCP' }], to: [{ ipBlock: { cidr: '10.40.0.0/16' } }] });
    });

    it('takes the port from the URL: explicit, else 443 for https and 80 for http', () => {
      const to = ['networkPolicy.egress.spendManagement.to=[{"ipBlock":{"cidr":"10.40.0.0/16"}}]'];
      const port = (url: string): string => ports(egress({ set: [`spendManagement.url=${url}`], setJson: to })[3] ?? {});
      expect(port('https://spend.example.com')).toBe('443/TCP');
      expect(port('http://spend.example.com')).toBe('80/TCP');
      expect(port('https://spend.example.com:8443/api')).toBe('8443/TCP');
    });

    it('lets out the collector only while tracing is on, to the namespace of its endpoint, on its port', () => {
      expect(egress({ set: ['otel.exporterOtlpEndpoint=http://otel-collector.observability.svc:4318'] }).map(ports)).not.toContain(
        '4318/TCP',
      );
      const collector = ruleFor({ set: ['otel.enabled=true', 'otel.exporterOtlpEndpoint=http://collector.tracing.svc:4317'] }, '4317/TCP');
      expect(collector?.to).toEqual([{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'tracing' } } }]);
    });

    it("needs no collector rule for the SDK's default endpoint (localhost, inside the pod) unless peers are given", () => {
      expect(egress({ set: ['otel.enabled=true'] }).map(ports)).toEqual(['53/UDP,53/TCP', '5432/TCP', '6379/TCP', '8080/TCP']);
      const given = ruleFor(
        { set: ['otel.enabled=true'], setJson: ['networkPolicy.egress.otelCollector.to=[{"ipBlock":{"cidr":"10.50.0.0/16"}}]'] },
        '4318/TCP',
      );
      expect(given?.to).toEqual([{ ipBlock: { cidr: '10.50.0.0/16' } }]);
    });
  });

  describe("the webhooks rule (443) exists only where the operator names the partners' destinations", () => {
    const publicOnly =
      'networkPolicy.egress.webhooks.to=[{"ipBlock":{"cidr":"0.0.0.0/0","except":["10.0.0.0/8","172.16.0.0/12","192.168.0.0/16","100.64.0.0/10","169.254.0.0/16","127.0.0.0/8"]}}]';

    it('has no rule by default: no webhook leaves the pod', () => {
      expect(egress().map(ports)).not.toContain('443/TCP');
    });

    it('lets out HTTPS to the public internet, private ranges excepted, when allowed on purpose', () => {
      const rule = ruleFor({ set: ['networkPolicy.egress.allowAnyDestination=true'], setJson: [publicOnly] }, '443/TCP');
      expect(rule?.to?.[0]?.ipBlock?.except).toContain('169.254.0.0/16');
    });

    it('is rendered from the worked example ci/webhooks-values.yaml: 443 to every public address', () => {
      const rule = ruleFor({ values: ['ci/webhooks-values.yaml'] }, '443/TCP');
      expect(rule?.to?.[0]?.ipBlock?.cidr).toBe('0.0.0.0/0');
      expect(rule?.to?.[0]?.ipBlock?.except).toEqual(expect.arrayContaining(['10.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16']));
    });

    it('refuses the /0 destination without allowAnyDestination', () => {
      expect(refused({ setJson: [publicOnly] })).toMatch(/networkPolicy\.egress\.webhooks\.to has ipBlock 0\.0\.0\.0\/0/);
    });
  });

  it('renders every rule of ci/everything-values.yaml in order: DNS, data stores, spend management, collector, NATS, extra', () => {
    const rules = egress({ values: ['ci/everything-values.yaml'] });
    expect(rules.map(ports)).toEqual(['53/UDP,53/TCP', '5432/TCP', '6379/TCP', '8080/TCP', '4318/TCP', '4222/TCP', '9000/TCP']);
    expect(rules[1]?.to).toEqual([{ ipBlock: { cidr: '10.20.0.0/16' } }]);
    expect(rules[4]?.to).toEqual([{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'observability' } } }]);
    expect(rules[5]?.to).toEqual([{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'nats' } } }]);
    expect(rules[6]?.to).toEqual([{ ipBlock: { cidr: '10.30.0.0/16' } }]);
  });

  it('opens NATS (events.natsUrl) only while it is set, at 4222 unless the URL names a port', () => {
    expect(egress({}).map(ports)).not.toContain('4222/TCP');
    expect(ruleFor({ set: ['events.natsUrl=nats://10.40.0.7'] }, '4222/TCP')?.to).toEqual([{ ipBlock: { cidr: '10.40.0.7/32' } }]);
    expect(ruleFor({ set: ['events.natsUrl=nats://nats.nats.svc:7422'] }, '7422/TCP')?.to).toEqual([
      { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'nats' } } },
    ]);
  });
});
