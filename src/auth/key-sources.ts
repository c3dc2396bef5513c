import { type FSWatcher, watch } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { initKeySourceMetrics, type Metrics } from '../observability/metrics.js';
import { InvalidKeySetError, type KeySet, type PartnerKeyStore, parseKeySet } from './partner-keys.js';

export type KeySourceName = 'file' | 'secrets_manager';

/**
 * Keeps a PartnerKeyStore fed from one source. `start()` loads once and fails when no valid set can
 * be had (the service must not start without keys); afterwards every change is loaded in the
 * background, and a bad one keeps the last good set, with a warning in the log and a metric.
 */
export interface KeySource {
  start(): Promise<void>;
  stop(): void;
  /** Re-reads the source now; resolves once the outcome is applied. */
  reload(): Promise<void>;
}

interface LoaderDeps {
  store: PartnerKeyStore;
  metrics: Metrics;
  log: Logger;
  source: KeySourceName;
  read: () => Promise<string>;
}

function createLoader({ store, metrics, log, source, read }: LoaderDeps) {
  let lastText: string | undefined;
  let lastTextValid = false;
  let running: Promise<void> | undefined;
  initKeySourceMetrics(metrics, source);

  async function load(initial: boolean): Promise<void> {
    let text: string;
    try {
      text = await read();
    } catch (error) {
      metrics.partnerKeyReloads.inc({ source, outcome: 'error' });
      metrics.partnerKeysLastLoadFailed.set({ source }, 1);
      const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).name;
      if (initial) throw new InvalidKeySetError(`partner keys could not be read from ${source}: ${reason}`);
      log.warn({ source, reason }, 'partner keys could not be read; serving the last good key set');
      return;
    }
    if (text === lastText) {
      // Unchanged: nothing to load. A read that failed before and works again clears the failure,
      // unless what it reads is still the version that was rejected.
      metrics.partnerKeysLastLoadFailed.set({ source }, lastTextValid ? 0 : 1);
      return;
    }
    try {
      const keys = parseKeySet(text);
      store.replace(keys);
      lastText = text;
      lastTextValid = true;
      metrics.markGoodKeyLoad(keys);
      metrics.partnerKeyReloads.inc({ source, outcome: 'success' });
      metrics.partnerKeysLastLoadFailed.set({ source }, 0);
      log.info({ source, keys: keys.size }, initial ? 'partner keys loaded' : 'partner keys reloaded');
      reportWeakKeys(keys, source, log);
    } catch (error) {
      lastText = text; // report a bad version once, not on every poll
      lastTextValid = false;
      metrics.partnerKeyReloads.inc({ source, outcome: 'invalid' });
      metrics.partnerKeysLastLoadFailed.set({ source }, 1);
      if (initial) throw error;
      log.warn({ source, reason: (error as Error).message }, 'partner keys update rejected; serving the last good key set');
    }
  }

  return {
    initial: () => load(true),
    /** Coalesces overlapping triggers (watch events and polls) into one read at a time. */
    refresh(): Promise<void> {
      running ??= load(false).finally(() => {
        running = undefined;
      });
      return running;
    },
  };
}

/**
 * Raw keys that still work but were not issued by `npm run keys` or are short, named by their
 * label (never by key), one line each at every load that brings a new version of the set.
 */
function reportWeakKeys(keys: KeySet, source: KeySourceName, log: Logger) {
  for (const { partner, weakness } of keys.values()) {
    if (weakness)
      log.warn({ source, partner: partner.name, reason: weakness }, 'partner key is weak or not in the issued format; replace it');
  }
}

/**
 * The Kubernetes-mounted Secret. kubelet swaps the content by renaming a `..data` symlink in the
 * mount directory, which a watch on the file itself misses: watch the directory, and poll as a
 * fallback (watch events are not guaranteed on every filesystem).
 */
export function fileKeySource(deps: Omit<LoaderDeps, 'read' | 'source'> & { path: string; pollIntervalMs: number }): KeySource {
  const loader = createLoader({ ...deps, source: 'file', read: () => readFile(deps.path, 'utf8') });
  let watcher: FSWatcher | undefined;
  let poll: NodeJS.Timeout | undefined;
  let debounce: NodeJS.Timeout | undefined;

  return {
    async start() {
      await loader.initial();
      try {
        watcher = watch(dirname(deps.path), () => {
          clearTimeout(debounce);
          debounce = setTimeout(() => void loader.refresh(), 50);
        });
        watcher.on('error', (error) => deps.log.warn({ reason: error.message }, 'partner keys watch failed; polling only'));
      } catch (error) {
        deps.log.warn({ reason: (error as Error).message }, 'partner keys watch unavailable; polling only');
      }
      poll = setInterval(() => void loader.refresh(), deps.pollIntervalMs);
      poll.unref();
    },
    stop() {
      watcher?.close();
      clearInterval(poll);
      clearTimeout(debounce);
    },
    reload: () => loader.refresh(),
  };
}

/**
 * AWS Secrets Manager, read through @aws-sdk/client-secrets-manager at start and refreshed on an
 * interval. `fetchSecret` is the one SDK call (configured-key-source.ts) and `release` frees its
 * client on stop; both are passed in so this logic is testable on its own.
 */
export function secretsManagerKeySource(
  deps: Omit<LoaderDeps, 'read' | 'source'> & {
    fetchSecret: () => Promise<string>;
    refreshIntervalMs: number;
    release?: () => void;
  },
): KeySource {
  const loader = createLoader({ ...deps, source: 'secrets_manager', read: deps.fetchSecret });
  let timer: NodeJS.Timeout | undefined;
  return {
    async start() {
      await loader.initial();
      timer = setInterval(() => void loader.refresh(), deps.refreshIntervalMs);
      timer.unref();
    },
    stop() {
      clearInterval(timer);
      deps.release?.();
    },
    reload: () => loader.refresh(),
  };
}
