/**
 * Where the suite's side doors are: everything the specs touch besides the partner API itself.
 * The partner API is `use.baseURL` (BASE_URL); the rest comes from E2E_* variables, which
 * e2e/playwright.config.ts sets for a local run and k8s-dev/run-e2e.sh sets for the kind cluster.
 * docs/qa.md lists them.
 */
export type PartnerKeysTarget =
  | { kind: 'file'; path: string }
  | {
      kind: 'kubernetes-secret';
      secret: string;
      /** Key of the Secret that holds the JSON document. */
      secretKey: string;
      namespace: string;
      /** kubectl --context; empty means the current context. */
      context: string;
      /** Label selector of the service pods, nudged after a change so the kubelet syncs sooner. */
      podSelector: string;
    };

export interface E2ESettings {
  databaseUrl: string;
  redisUrl: string;
  redisKeyPrefix: string;
  simulatorUrl: string;
  partnerKeys: PartnerKeysTarget;
  /** How long a new key may take to be served (401 -> 200). */
  keyPropagationTimeoutMs: number;
  /** BASE_URL is the ingress: only /partner/* is routed. */
  viaIngress: boolean;
  /** Delete the rows, Redis hashes and keys a worker made when it finishes. */
  cleanup: boolean;
}

function required(name: string): string {
  const value = process.env[name]?.trim();
  if (!value) {
    throw new Error(
      `${name} is not set. With BASE_URL set, the e2e suite needs the seeding variables too ` +
        '(E2E_DATABASE_URL, E2E_REDIS_URL, E2E_REDIS_KEY_PREFIX, E2E_SIMULATOR_URL and E2E_PARTNER_KEYS_FILE or ' +
        'E2E_PARTNER_KEYS_SECRET): see docs/qa.md, or use k8s-dev/run-e2e.sh.',
    );
  }
  return value;
}

function flag(name: string, fallback: boolean): boolean {
  const value = process.env[name]?.trim();
  if (value === undefined || value === '') return fallback;
  return value === '1' || value.toLowerCase() === 'true';
}

export function loadSettings(): E2ESettings {
  const keysFile = process.env.E2E_PARTNER_KEYS_FILE?.trim();
  const keysSecret = process.env.E2E_PARTNER_KEYS_SECRET?.trim();
  if (keysFile && keysSecret) throw new Error('set only one of E2E_PARTNER_KEYS_FILE and E2E_PARTNER_KEYS_SECRET');
  if (!keysFile && !keysSecret) required('E2E_PARTNER_KEYS_FILE');

  const partnerKeys: PartnerKeysTarget = keysFile
    ? { kind: 'file', path: keysFile }
    : {
        kind: 'kubernetes-secret',
        secret: keysSecret!,
        secretKey: process.env.E2E_PARTNER_KEYS_SECRET_KEY?.trim() || 'partner-keys.json',
        namespace: required('E2E_KUBE_NAMESPACE'),
        context: process.env.E2E_KUBE_CONTEXT?.trim() ?? '',
        podSelector:
          process.env.E2E_SERVICE_POD_SELECTOR?.trim() ?? 'app.kubernetes.io/name=partner-agent-status,app.kubernetes.io/component=api',
      };

  return {
    databaseUrl: required('E2E_DATABASE_URL'),
    redisUrl: required('E2E_REDIS_URL'),
    // May legitimately be empty (the chart's default): read it raw.
    redisKeyPrefix: process.env.E2E_REDIS_KEY_PREFIX ?? '',
    simulatorUrl: required('E2E_SIMULATOR_URL'),
    partnerKeys,
    // A mounted Secret reaches a pod at the kubelet's next sync (about a minute, plus its cache);
    // a local file within the service's poll interval.
    keyPropagationTimeoutMs: Number(process.env.E2E_KEY_PROPAGATION_TIMEOUT_MS || (keysFile ? 15_000 : 180_000)),
    viaIngress: flag('E2E_VIA_INGRESS', false),
    cleanup: flag('E2E_CLEANUP', true),
  };
}
