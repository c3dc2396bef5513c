import type { LookupAddress } from 'node:dns';
import { Resolver } from 'node:dns/promises';

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;
/** A resolver of the shape net/tls `connect` take as `lookup` (the tests' stubs). */
export type Lookup = (hostname: string, options: { all?: boolean; family?: number | string }, callback: LookupCallback) => void;

/**
 * Name resolution of webhook hosts (docs/interfaces.md §14), off libuv's thread pool: `dns.lookup`
 * (getaddrinfo) runs on the pool's four threads, which the service's own work shares, and has no
 * time-out, so a partner's names that never answer used to queue everything else behind them. This
 * asks name servers directly (c-ares, on the event loop), each query bounded in time and tried
 * twice, and a network has at most a few lookups under way at once in a replica.
 */
export type HostQuery = (host: string) => Promise<LookupAddress[]>;

/** A name that did not resolve (no answer, no address, or no answer in time). */
class UnresolvedHost extends Error {
  override readonly name = 'UnresolvedHost';
  readonly code = 'ERR_WEBHOOK_UNRESOLVED_HOST';
  constructor(reason: string) {
    super(`webhook host did not resolve (${reason})`);
  }
}

/** A network already has as many lookups under way as it may. */
export class LookupsBusy extends Error {
  override readonly name = 'LookupsBusy';
  readonly code = 'ERR_WEBHOOK_LOOKUPS_BUSY';
  constructor() {
    super('too many webhook host lookups of this network under way');
  }
}

/** Special-use names (RFC 6761) that never reach a name server. */
const localName = /(^|\.)(localhost|local|internal|invalid)\.?$/i;

/** Queries name servers for A and AAAA records, `timeoutMs` a query, tried twice. */
export function dnsQuery(settings: { servers: readonly string[]; timeoutMs: number }): HostQuery {
  const resolver = new Resolver({ timeout: settings.timeoutMs, tries: 2 });
  if (settings.servers.length > 0) resolver.setServers([...settings.servers]);
  return async (host) => {
    if (localName.test(host)) throw new UnresolvedHost('a special-use name');
    const [v4, v6] = await Promise.allSettled([resolver.resolve4(host), resolver.resolve6(host)]);
    const addresses: LookupAddress[] = [
      ...(v4.status === 'fulfilled' ? v4.value.map((address) => ({ address, family: 4 })) : []),
      ...(v6.status === 'fulfilled' ? v6.value.map((address) => ({ address, family: 6 })) : []),
    ];
    if (addresses.length > 0) return addresses;
    const failure = v4.status === 'rejected' ? v4.reason : v6.status === 'rejected' ? v6.reason : undefined;
    throw new UnresolvedHost((failure as { code?: string } | undefined)?.code ?? 'no address');
  };
}

/** A `lookup`-style resolver (the tests' stubs) as a HostQuery. */
export function queryOfLookup(lookup: Lookup): HostQuery {
  return (host) =>
    new Promise((resolve, reject) => {
      lookup(host, { all: true }, (error, addresses) => {
        if (error) reject(new UnresolvedHost(error.code ?? error.message));
        else resolve(addresses as LookupAddress[]);
      });
    });
}

/**
 * At most `perNetwork` lookups of one network under way at once: one more is refused at once
 * (LookupsBusy) rather than queued, so a network's names cost the others nothing and its own
 * requests a quick, clear answer. Each network with lookups under way has a resolver (a c-ares
 * channel) of its own: one network's queries that time out leave no mark on the channel another
 * network's queries use (c-ares keeps per-server state, failures and timings, on its channel).
 */
export class NetworkLookups {
  private readonly underWay = new Map<string, { count: number; query: HostQuery }>();

  constructor(
    private readonly newQuery: () => HostQuery,
    private readonly perNetwork: number,
    private readonly onBusy: () => void = () => {},
  ) {}

  async resolve(host: string, networkId: string): Promise<LookupAddress[]> {
    const entry = this.underWay.get(networkId) ?? { count: 0, query: this.newQuery() };
    if (entry.count >= this.perNetwork) {
      this.onBusy();
      throw new LookupsBusy();
    }
    entry.count += 1;
    this.underWay.set(networkId, entry);
    try {
      return await entry.query(host);
    } finally {
      entry.count -= 1;
      if (entry.count === 0) this.underWay.delete(networkId);
    }
  }
}
