import type { PartnerKeyStore } from '../auth/partner-keys.js';
import type { Metrics } from '../observability/metrics.js';

const pingTimeoutMs = 1_000;

/**
 * Readiness (docs/interfaces.md §3, §13): keys loaded, the database answering and taking writes,
 * and not draining. The database is asked through a pool of its own, so a pool saturated by partner
 * traffic is busy, not down: the replica stays ready while PostgreSQL answers, and load never turns
 * every replica unready at once. A server that answers read-only (a standby, a demoted primary, the
 * old address after a failover) makes the replica unready and calls `onReadOnly` (the replica leaves
 * that server: src/stores/database-failover.ts), so the next probe reaches whatever DATABASE_URL
 * resolves to then, and readiness comes back by itself once that server takes writes. Concurrent
 * probes share one ping.
 */
export function createReadiness(deps: {
  ping: () => Promise<'writable' | 'read_only'>;
  onReadOnly: () => void;
  keyStore: PartnerKeyStore;
  metrics: Metrics;
}) {
  let draining = false;
  let inFlight: Promise<boolean> | undefined;

  async function databaseTakesWrites(): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), pingTimeoutMs);
    });
    try {
      return await Promise.race([
        deps.ping().then((server) => {
          if (server === 'writable') return true;
          deps.onReadOnly();
          return false;
        }),
        timeout,
      ]);
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  return {
    async isReady(): Promise<boolean> {
      inFlight ??= databaseTakesWrites().finally(() => {
        inFlight = undefined;
      });
      const ready = !draining && deps.keyStore.loaded && (await inFlight);
      deps.metrics.ready.set(ready ? 1 : 0);
      return ready;
    },
    startDraining(): void {
      draining = true;
      deps.metrics.ready.set(0);
    },
    get draining(): boolean {
      return draining;
    },
  };
}
