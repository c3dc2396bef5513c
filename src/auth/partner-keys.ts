import { createHash } from 'node:crypto';
import { z } from 'zod';
import { apiVersionNames, isApiVersion } from '../api-versions.js';
import { fingerprintKey, KeyFinder, type KeyFingerprint, registerKeyFinder } from '../observability/key-finder.js';
import { isIssuedKey } from './issued-key.js';

/** Who is calling: the record a partner key is bound to (docs/interfaces.md §4). */
export interface Partner {
  networkId: string;
  name: string;
  /** The API version the key is pinned to (docs/interfaces.md §15): a request naming none gets it. */
  apiVersion?: string;
}

/**
 * One entry of a key set. `stored` says how the secret holds it: the key itself (`raw`) or only its
 * SHA-256 (`hashed`, entry name `sha256:<hex>`). `weakness` flags a raw key that works but was not
 * issued by `npm run keys` (`unformatted`) or is shorter than 32 characters (`short`); a hashed
 * entry cannot be judged.
 */
export interface KeyEntry {
  partner: Partner;
  /** Unix milliseconds after which the key is refused; none when the entry has no `expiresAt`. */
  expiresAt?: number;
  stored: 'raw' | 'hashed';
  weakness?: 'short' | 'unformatted';
}

export const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
// Keys are opaque strings issued by the operator; refuse ones too short to be secret or odd enough
// to be a paste mistake (whitespace, control characters).
const keyPattern = /^[\x21-\x7e]{16,512}$/;
const hashedPrefix = 'sha256:';
const hashedPattern = /^sha256:[0-9a-f]{64}$/;
/** RFC 3339 with an offset (`Z` or `±hh:mm`), checked as a calendar date too (no 30 February). */
const rfc3339 = z.iso.datetime({ offset: true });

export class InvalidKeySetError extends Error {
  override readonly name = 'InvalidKeySetError';
}

/** A parsed, valid key set: SHA-256 of each key to its entry. The keys themselves are not kept. */
export type KeySet = ReadonlyMap<string, KeyEntry>;

/** The fingerprints of a parsed set's raw entries (key-finder.ts), beside the set rather than in its entries. */
const fingerprintsOf = new WeakMap<KeySet, KeyFingerprint[]>();

export function hashKey(apiKey: string): string {
  return createHash('sha256').update(apiKey).digest('hex');
}

/** The first 12 hex digits of a key's SHA-256: how the operator names a key without showing it. */
export function fingerprintOf(digest: string): string {
  return digest.slice(0, 12);
}

/** The moment an `expiresAt` value stands for, or undefined when it is not RFC 3339. */
export function parseExpiry(value: string): number | undefined {
  return rfc3339.safeParse(value).success ? Date.parse(value) : undefined;
}

/** The SHA-256 an entry name stands for: its own hex for `sha256:<hex>`, else the digest of the key. */
export function entryDigest(entryName: string): string {
  return entryName.startsWith(hashedPrefix) ? entryName.slice(hashedPrefix.length) : hashKey(entryName);
}

/**
 * Parses the secret's JSON, `{"partner-keys": {"<API_KEY>" | "sha256:<hex>": {"networkId", "name",
 * "expiresAt"?, "apiVersion"?}}}`. Any bad entry makes the whole set invalid, so a half-broken rotation never
 * silently drops partners. Error messages name entries by position and partner label, never by key.
 */
export function parseKeySet(text: string): KeySet {
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch {
    throw new InvalidKeySetError('partner keys are not valid JSON');
  }
  if (!isObject(document) || !isObject(document['partner-keys'])) {
    throw new InvalidKeySetError('partner keys JSON has no "partner-keys" object');
  }
  const entries = Object.entries(document['partner-keys']);
  if (entries.length === 0) throw new InvalidKeySetError('partner keys JSON holds no key');

  const keys = new Map<string, KeyEntry>();
  const fingerprints: KeyFingerprint[] = [];
  entries.forEach(([entryName, record], index) => {
    const where = `entry ${index + 1}${isObject(record) && typeof record.name === 'string' ? ` ("${record.name}")` : ''}`;
    const stored = entryName.startsWith(hashedPrefix) ? 'hashed' : 'raw';
    if (stored === 'hashed' && !hashedPattern.test(entryName)) {
      throw new InvalidKeySetError(`${where}: a hashed entry must be "sha256:" and 64 lowercase hex digits`);
    }
    if (stored === 'raw' && !keyPattern.test(entryName)) {
      throw new InvalidKeySetError(`${where}: key must be 16 to 512 printable characters without spaces`);
    }
    if (!isObject(record)) throw new InvalidKeySetError(`${where}: record must be an object`);
    const { networkId, name, expiresAt, apiVersion } = record;
    if (typeof networkId !== 'string' || !uuidPattern.test(networkId)) {
      throw new InvalidKeySetError(`${where}: networkId must be a UUID`);
    }
    if (typeof name !== 'string' || name.trim() === '' || name.length > 128) {
      throw new InvalidKeySetError(`${where}: name must be a non-empty string of at most 128 characters`);
    }
    const expiry = typeof expiresAt === 'string' ? parseExpiry(expiresAt) : undefined;
    if (expiresAt !== undefined && expiry === undefined) {
      throw new InvalidKeySetError(`${where}: expiresAt must be an RFC 3339 date-time with an offset, such as 2027-01-31T00:00:00Z`);
    }
    if (apiVersion !== undefined && !isApiVersion(apiVersion)) {
      throw new InvalidKeySetError(`${where}: apiVersion must be one of the API versions (${apiVersionNames.join(', ')})`);
    }
    const digest = entryDigest(entryName);
    if (keys.has(digest)) throw new InvalidKeySetError(`${where}: the same key is in the set twice (raw and hashed)`);
    const entry: KeyEntry = {
      partner: { networkId: networkId.toLowerCase(), name, ...(apiVersion === undefined ? {} : { apiVersion }) },
      stored,
    };
    if (expiry !== undefined) entry.expiresAt = expiry;
    if (stored === 'raw' && entryName.length < 32) entry.weakness = 'short';
    else if (stored === 'raw' && !isIssuedKey(entryName)) entry.weakness = 'unformatted';
    keys.set(digest, entry);
    if (stored === 'raw') {
      fingerprints.push(fingerprintKey(entryName, digest));
      // As a JSON log line writes it, when that differs (a key with `"` or `\`).
      const escaped = JSON.stringify(entryName).slice(1, -1);
      if (escaped !== entryName) fingerprints.push(fingerprintKey(escaped));
    }
  });
  fingerprintsOf.set(keys, fingerprints);
  return keys;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The key set the service serves. Lookups hash the presented key and read a Map, so the time taken
 * does not depend on how much of a key matches; raw and hashed entries share that one map. A key
 * past its `expiresAt` is refused like an unknown one. A reload replaces the whole set at once; a
 * bad reload leaves the last good set in place (the caller reports it).
 */
export class PartnerKeyStore {
  #keys: KeySet | undefined;
  /** Finds this set's keys in logs, spans and answers (key-finder.ts). */
  readonly #finder = new KeyFinder();

  constructor() {
    registerKeyFinder(this.#finder);
  }

  get loaded(): boolean {
    return this.#keys !== undefined;
  }

  get size(): number {
    return this.#keys?.size ?? 0;
  }

  replace(keys: KeySet): void {
    this.#finder.replace(keys.keys(), fingerprintsOf.get(keys) ?? []);
    this.#keys = keys;
  }

  lookup(apiKey: string, now = Date.now()): Partner | undefined {
    const digest = hashKey(apiKey);
    const entry = this.#keys?.get(digest);
    if (entry === undefined || (entry.expiresAt !== undefined && now >= entry.expiresAt)) return undefined;
    // A hashed entry's key is seen only now: from here on the finder knows where it stands in any text.
    if (entry.stored === 'hashed' && this.#finder.needsFingerprint(digest)) this.#finder.learn(apiKey, digest);
    return entry.partner;
  }

  /** Whether a string is one of the set's keys, expired or not (never echo one back). */
  holds(candidate: string): boolean {
    return this.#keys?.has(hashKey(candidate)) ?? false;
  }

  /** Whether a string is or holds one of the set's keys anywhere in it (`Bearer <key>`, say). */
  holdsAnywhere(text: string): boolean {
    return this.holds(text) || this.#finder.find(text).length > 0;
  }

  /** The entries, for the metrics that describe the set (names and expiries, never keys). */
  entries(): Iterable<KeyEntry> {
    return this.#keys?.values() ?? [];
  }
}
