import { hash } from 'node:crypto';

/**
 * Finds partner keys inside any text (a log line, a span attribute, a problem's detail), wherever a
 * partner put them: a path, a header, a query, a body member name. Keys are not kept in memory, so
 * candidates are checked by digest against the loaded key set (`holds`), in two ways:
 *
 * - every substring of a known key length whose rolling hash is a loaded key's: sound for every raw
 *   key of the set (fingerprinted at load) and every hashed entry once it has been used to
 *   authenticate in this process (its length and rolling hash are learned then), whatever
 *   characters surround it;
 * - while some hashed entries are not fingerprinted yet, also every token (a run of characters that
 *   keys are made of, split on the others) of 16 to 512 characters.
 *
 * A 32-bit rolling hash is not a secret: it only selects the few substrings whose SHA-256 is looked
 * up. The finders of every key store in the process are registered on globalThis, so that the
 * tracing preload (its own bundle) and the logger use the same ones.
 */
export interface KeyFingerprint {
  digest: string;
  length: number;
  rolling: number;
}

const base = 0x01000193;
const minKeyLength = 16;
const maxKeyLength = 512;
/** Runs of characters keys are commonly made of (URL-safe, then also Base64's and a few more); the token scan's candidates. */
const tokenPatterns = [/[A-Za-z0-9_-]{16,}/g, /[A-Za-z0-9._~+/=-]{16,}/g];

/** One-shot hashing: a third cheaper than a Hash object for the short strings the token scan digests. */
function sha256(text: string): string {
  return hash('sha256', text);
}

function rollingHash(text: string, start: number, length: number): number {
  let hash = 0;
  for (let i = start; i < start + length; i++) hash = (Math.imul(hash, base) + text.charCodeAt(i)) | 0;
  return hash;
}

/** A key's fingerprint, from the key itself (at load, or once it authenticated). */
export function fingerprintKey(key: string, digest = sha256(key)): KeyFingerprint {
  return { digest, length: key.length, rolling: rollingHash(key, 0, key.length) };
}

export class KeyFinder {
  /** key length → rolling hashes of the keys of that length. */
  #byLength = new Map<number, Set<number>>();
  #fingerprinted = new Set<string>();
  #digests: ReadonlySet<string> = new Set();
  #unfingerprinted = 0;
  readonly #powers = new Map<number, number>();

  /** A new key set: its digests, and the fingerprints known for its entries. */
  replace(digests: Iterable<string>, fingerprints: readonly KeyFingerprint[]): void {
    // A fingerprint may stand for a key's escaped form (as a JSON line writes it): its digest counts too.
    this.#digests = new Set([...digests, ...fingerprints.map((fingerprint) => fingerprint.digest)]);
    this.#byLength = new Map();
    this.#fingerprinted = new Set();
    for (const fingerprint of fingerprints) this.#add(fingerprint);
    this.#unfingerprinted = [...this.#digests].filter((digest) => !this.#fingerprinted.has(digest)).length;
  }

  /** Whether a digest of the set has no fingerprint yet (a hashed entry not used so far). */
  needsFingerprint(digest: string): boolean {
    return this.#unfingerprinted > 0 && !this.#fingerprinted.has(digest);
  }

  /** A key that just authenticated: from now on it is found wherever it stands. */
  learn(key: string, digest: string): void {
    if (!this.#digests.has(digest) || this.#fingerprinted.has(digest)) return;
    this.#add(fingerprintKey(key, digest));
    this.#unfingerprinted -= 1;
  }

  #add(fingerprint: KeyFingerprint): void {
    if (!this.#digests.has(fingerprint.digest)) return;
    this.#fingerprinted.add(fingerprint.digest);
    const hashes = this.#byLength.get(fingerprint.length) ?? new Set<number>();
    hashes.add(fingerprint.rolling);
    this.#byLength.set(fingerprint.length, hashes);
  }

  #power(length: number): number {
    let power = this.#powers.get(length);
    if (power === undefined) {
      power = 1;
      for (let i = 1; i < length; i++) power = Math.imul(power, base);
      this.#powers.set(length, power);
    }
    return power;
  }

  /** The [start, end) ranges of every key of the set found in `text`. */
  find(text: string): Array<[number, number]> {
    const found: Array<[number, number]> = [];
    if (text.length < minKeyLength) return found;
    for (const [length, hashes] of this.#byLength) {
      if (text.length < length) continue;
      const top = this.#power(length);
      let hash = rollingHash(text, 0, length);
      for (let i = 0; ; i++) {
        if (hashes.has(hash) && this.#digests.has(sha256(text.slice(i, i + length)))) found.push([i, i + length]);
        if (i + length >= text.length) break;
        hash = (Math.imul((hash - Math.imul(text.charCodeAt(i), top)) | 0, base) + text.charCodeAt(i + length)) | 0;
      }
    }
    if (this.#unfingerprinted > 0) {
      // A token of the first pattern is often a token of the second too: each is digested once.
      const digested = new Map<number, number>();
      for (const pattern of tokenPatterns) {
        for (const match of text.matchAll(pattern)) {
          const start = match.index;
          const end = start + match[0].length;
          if (match[0].length > maxKeyLength || digested.get(start) === end) continue;
          digested.set(start, end);
          if (this.#digests.has(sha256(match[0]))) found.push([start, end]);
        }
      }
    }
    return found;
  }
}

const registryKey = Symbol.for('partner-agent-status.key-finders');

/** Every live finder of the process (one per key store; a test process has many). */
function registry(): Set<WeakRef<KeyFinder>> {
  const global = globalThis as Record<symbol, Set<WeakRef<KeyFinder>> | undefined>;
  global[registryKey] ??= new Set();
  return global[registryKey];
}

export function registerKeyFinder(finder: KeyFinder): void {
  registry().add(new WeakRef(finder));
}

const keyRedacted = 'REDACTED';

/** `text` with every loaded key in it replaced by REDACTED; the same string when it holds none. */
export function redactKnownKeys(text: string): string {
  if (text.length < minKeyLength) return text;
  let ranges: Array<[number, number]> | undefined;
  for (const reference of registry()) {
    const finder = reference.deref();
    if (!finder) {
      registry().delete(reference);
      continue;
    }
    const found = finder.find(text);
    if (found.length > 0) ranges = [...(ranges ?? []), ...found];
  }
  if (!ranges) return text;
  ranges.sort((a, b) => a[0] - b[0]);
  let result = '';
  let at = 0;
  for (const [start, end] of ranges) {
    if (end <= at) continue;
    result += `${text.slice(at, Math.max(at, start))}${keyRedacted}`;
    at = end;
  }
  return result + text.slice(at);
}

/** Whether `text` holds a loaded key anywhere. */
export function holdsKnownKey(text: string): boolean {
  return redactKnownKeys(text) !== text;
}
