import type { LookupAddress } from 'node:dns';
import { BlockList, isIP } from 'node:net';
import type { buildConnector } from 'undici';
import { parseCidr } from '../config.js';
import { dnsQuery, type HostQuery, type Lookup, LookupsBusy, queryOfLookup } from './webhook-resolver.js';

/**
 * The webhook sender's guard against request forgery: the service never connects to a loopback,
 * private, link-local, shared, multicast or reserved address, whether a URL names it literally,
 * through DNS or through a redirect (redirects are never followed). The check runs on the address
 * a connection is actually made to: an IP literal before `connect`, a name inside the `lookup`
 * that `connect` itself calls, so a name resolved again for every connection (DNS rebinding) is
 * checked again every time.
 */

/** IPv4 space that is not public unicast. */
const forbiddenV4: readonly [string, number][] = [
  ['0.0.0.0', 8], // "this network"
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // shared (carrier-grade NAT)
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, cloud metadata (169.254.169.254)
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // protocol assignments
  ['192.0.2.0', 24], // documentation
  ['192.88.99.0', 24], // 6to4 relay anycast
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation
  ['203.0.113.0', 24], // documentation
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
];

/**
 * IPv6: only global unicast (2000::/3) may be reached, and not the parts of it that embed or stand
 * for other space. Everything outside 2000::/3 is refused: `::`, `::1`, IPv4-mapped `::ffff:0:0/96`,
 * NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, unique local `fc00::/7` (AWS metadata fd00:ec2::254),
 * link-local `fe80::/10`, multicast `ff00::/8`.
 */
const globalUnicastV6: readonly [string, number] = ['2000::', 3];
const forbiddenWithinV6: readonly [string, number][] = [
  ['2001::', 23], // protocol assignments (Teredo 2001::/32 embeds IPv4)
  ['2001:db8::', 32], // documentation
  ['2002::', 16], // 6to4 (embeds IPv4)
  ['3fff::', 20], // documentation
];

const forbidden = new BlockList();
for (const [address, prefix] of forbiddenV4) forbidden.addSubnet(address, prefix, 'ipv4');
for (const [address, prefix] of forbiddenWithinV6) forbidden.addSubnet(address, prefix, 'ipv6');
const globalV6 = new BlockList();
globalV6.addSubnet(globalUnicastV6[0], globalUnicastV6[1], 'ipv6');

/** Why an address may not be connected to. */
export class ForbiddenAddress extends Error {
  override readonly name = 'ForbiddenAddress';
  readonly code = 'ERR_WEBHOOK_FORBIDDEN_ADDRESS';
  constructor(readonly address: string) {
    super(`webhook address ${address} is not a public address`);
  }
}

/** Ranges an operator lets the sender reach after all (WEBHOOK_ALLOWED_CIDRS; tests only). */
export function allowedRanges(cidrs: readonly string[]): BlockList {
  const list = new BlockList();
  for (const cidr of cidrs) {
    const [address, prefix] = parseCidr(cidr);
    list.addSubnet(address, prefix, isIP(address) === 6 ? 'ipv6' : 'ipv4');
  }
  return list;
}

/** Whether the service may connect to this IP address (the classifier; no socket, no DNS). */
export function isPublicAddress(address: string, allowed?: BlockList): boolean {
  const family = isIP(address);
  if (family === 0) return false;
  const type = family === 4 ? 'ipv4' : 'ipv6';
  if (allowed?.check(address, type)) return true;
  if (family === 4) return !forbidden.check(address, 'ipv4');
  return globalV6.check(address, 'ipv6') && !forbidden.check(address, 'ipv6');
}

export type { Lookup };

/**
 * A `lookup` for net/tls `connect` that answers only when every address the name resolves to is
 * public: one private answer among public ones refuses the name (a rebinding name would otherwise
 * get the connection by racing it). Names are resolved by `query` (webhook-resolver.ts: name
 * servers asked directly, bounded in time), never by getaddrinfo on the thread pool.
 */
function guardedLookup(allowed: BlockList | undefined, query: HostQuery): Lookup {
  return (hostname, options, callback) => {
    query(hostname).then(
      (list) => {
        const refused = list.find((entry) => !isPublicAddress(entry.address, allowed));
        if (refused || list.length === 0) return callback(new ForbiddenAddress(refused?.address ?? hostname), options.all ? [] : '');
        if (options.all) return callback(null, list);
        return callback(null, list[0]!.address, list[0]!.family);
      },
      (error: NodeJS.ErrnoException) => callback(error, options.all ? [] : ''),
    );
  };
}

export interface GuardOptions {
  allowed?: BlockList;
  /** WEBHOOK_ALLOWED_PORTS: ports besides 443 a connection may use. */
  allowedPorts?: readonly number[];
  connectTimeoutMs: number;
  /** DNS resolution: a `lookup`-style stub (tests), or a HostQuery; default the system's name servers via dnsQuery. */
  resolve?: Lookup;
  query?: HostQuery;
}

function queryOf(options: { resolve?: Lookup; query?: HostQuery }): HostQuery {
  if (options.query) return options.query;
  if (options.resolve) return queryOfLookup(options.resolve);
  return dnsQuery({ servers: [], timeoutMs: 1_500 });
}

/** Whether a URL's port may be called: 443, a port the operator allowed, any port within WEBHOOK_ALLOWED_CIDRS. */
function portAllowed(port: number, allowedPorts: readonly number[] | undefined, allowed: BlockList | undefined): boolean {
  return port === 443 || (allowedPorts ?? []).includes(port) || allowed !== undefined;
}

/**
 * An undici connector that refuses every connection to an address isPublicAddress refuses. undici's
 * `buildConnector` is handed in: the sender loads undici with its first delivery, not at start.
 */
export function guardedConnector(options: GuardOptions, build: typeof buildConnector): buildConnector.connector {
  const connect = build({
    timeout: options.connectTimeoutMs,
    lookup: guardedLookup(options.allowed, queryOf(options)),
    allowH2: false,
  } as buildConnector.BuildOptions);
  return (target, callback) => {
    const port = Number(target.port) || (target.protocol === 'https:' ? 443 : 80);
    // http (a test setting, WEBHOOK_ALLOW_HTTP) reaches only what registration let through.
    // net.connect skips `lookup` for an IP literal: the literal is checked here.
    const literal = isIP(target.hostname) !== 0;
    const plainHttp = target.protocol === 'http:' && port === 80;
    if (
      (literal && !isPublicAddress(target.hostname, options.allowed)) ||
      !(plainHttp || portAllowed(port, options.allowedPorts, options.allowed))
    ) {
      callback(new ForbiddenAddress(target.hostname), null);
      return;
    }
    connect(target, callback);
  };
}

/**
 * The one refusal of every URL the service will not call because of where it points: an address
 * that is not public, named literally or resolved, and a name that does not resolve (in time) all
 * get these very words, so that no answer tells a partner which internal names exist.
 */
export const unreachableUrl =
  'url must name a host whose every address is public and resolves within a few seconds; this one is not called';

export interface UrlSettings {
  allowHttp: boolean;
  allowed?: BlockList;
  allowedPorts?: readonly number[];
  /** Resolves a name (webhook-resolver.ts NetworkLookups.resolve with the network bound); throws LookupsBusy when the network has too many under way. */
  resolveHost?: (host: string) => Promise<LookupAddress[]>;
  /** A `lookup`-style stub, when resolveHost is not given (tests). */
  resolve?: Lookup;
}

/** What is wrong with a URL a partner registers, or undefined when it may be registered. Throws LookupsBusy. */
export async function refusalOfUrl(raw: string, settings: UrlSettings): Promise<string | undefined> {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return 'url must be an absolute URL';
  }
  const schemes = settings.allowHttp ? ['https:', 'http:'] : ['https:'];
  if (!schemes.includes(url.protocol)) return 'url must use https';
  if (url.username || url.password) return 'url must not carry credentials';
  if (url.hash) return 'url must not have a fragment';
  // (http, a test setting, on its own default port too.)
  const port = Number(url.port) || (url.protocol === 'https:' ? 443 : 80);
  if (!(url.protocol === 'http:' && port === 80) && !portAllowed(port, settings.allowedPorts, settings.allowed)) {
    const others = settings.allowedPorts?.length ? ` (or ${settings.allowedPorts.join(', ')})` : '';
    return `url must use port 443${others}`;
  }
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  if (isIP(host) !== 0) return isPublicAddress(host, settings.allowed) ? undefined : unreachableUrl;
  const resolveHost = settings.resolveHost ?? queryOf(settings);
  let addresses: LookupAddress[];
  try {
    addresses = await resolveHost(host);
  } catch (error) {
    if (error instanceof LookupsBusy) throw error;
    return unreachableUrl;
  }
  const everyPublic = addresses.length > 0 && addresses.every((entry) => isPublicAddress(entry.address, settings.allowed));
  return everyPublic ? undefined : unreachableUrl;
}
