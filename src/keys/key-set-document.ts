import {
  entryDigest,
  fingerprintOf,
  InvalidKeySetError,
  type KeyEntry,
  type KeySet,
  parseKeySet,
  uuidPattern,
} from '../auth/partner-keys.js';

/** A refusal of the keys tool: one line for the operator, never holding a key. */
export class KeysToolError extends Error {
  override readonly name = 'KeysToolError';
}

/** A key set document as stored, with the entries the service would load from it. */
interface KeySetDocument {
  /** The whole JSON object: other members and fields the tool does not know are kept as they are. */
  json: Record<string, unknown> & { 'partner-keys': Record<string, unknown> };
  keys: KeySet;
}

/**
 * Reads the stored text; `undefined` (no file or an empty secret) and an empty `partner-keys`
 * object are a set with no key yet. Anything the service would reject stops the tool: it never
 * builds on a set it cannot read the way the service does.
 */
export function readKeySetDocument(text: string | undefined, where: string): KeySetDocument {
  if (text === undefined || text.trim() === '') return { json: { 'partner-keys': {} }, keys: new Map() };
  try {
    const json = JSON.parse(text);
    const entries = json?.['partner-keys'];
    const isEmpty = typeof entries === 'object' && entries !== null && !Array.isArray(entries) && Object.keys(entries).length === 0;
    return { json, keys: isEmpty ? new Map() : parseKeySet(text) };
  } catch (error) {
    const reason = error instanceof InvalidKeySetError ? error.message : 'partner keys are not valid JSON';
    throw new KeysToolError(`the key set in ${where} is invalid (${reason}); fix it first, nothing was changed`);
  }
}

export interface NewEntry {
  entryName: string;
  networkId: string;
  name: string;
  expiresAt?: string;
  /** The API version the key is pinned to (docs/interfaces.md §15). */
  apiVersion?: string;
}

/** Checks a new entry's fields the way the service will, before anything is read or written. */
export function checkNewEntry(fields: { networkId: string; name: string }): void {
  if (!uuidPattern.test(fields.networkId)) throw new KeysToolError(`--network must be a UUID, got "${fields.networkId}"`);
  if (fields.name.trim() === '' || fields.name.length > 128) throw new KeysToolError('--name must be 1 to 128 characters');
}

/**
 * The document with one entry added. A name may be in the set already: it is the partner's label,
 * and a partner rotating its key holds two keys under it for a while (docs/interfaces.md §12);
 * fingerprints tell them apart.
 */
export function withEntry(document: KeySetDocument, entry: NewEntry): string {
  const record: Record<string, string> = { networkId: entry.networkId.toLowerCase(), name: entry.name };
  if (entry.expiresAt !== undefined) record.expiresAt = entry.expiresAt;
  if (entry.apiVersion !== undefined) record.apiVersion = entry.apiVersion;
  const json = { ...document.json, 'partner-keys': { ...document.json['partner-keys'], [entry.entryName]: record } };
  return serialize(json);
}

/** Which key `revoke` removes: the one whose digest starts with a fingerprint, or the one key of a name. */
export type KeySelector = { fingerprint: string } | { name: string };

/**
 * The entry the selector names, refusing none, several, or the last key. A name selects only
 * while one key carries it; with several (a rotation) the fingerprint must say which.
 */
export function withoutEntry(
  document: KeySetDocument,
  selector: KeySelector,
  where: string,
): { text: string; removed: KeyEntry; fingerprint: string } {
  const entryNames = Object.keys(document.json['partner-keys']);
  let matches: string[];
  if ('fingerprint' in selector) {
    const { fingerprint } = selector;
    matches = entryNames.filter((entryName) => entryDigest(entryName).startsWith(fingerprint));
    if (matches.length === 0) throw new KeysToolError(`no key in ${where} has fingerprint ${fingerprint}; see "list"`);
    if (matches.length > 1) throw new KeysToolError(`fingerprint ${fingerprint} matches ${matches.length} keys; give more of its digits`);
  } else {
    const { name } = selector;
    matches = entryNames.filter((entryName) => document.keys.get(entryDigest(entryName))?.partner.name === name);
    if (matches.length === 0) throw new KeysToolError(`no key in ${where} is named "${name}"; see "list"`);
    if (matches.length > 1) {
      const fingerprints = matches.map((entryName) => fingerprintOf(entryDigest(entryName))).join(', ');
      throw new KeysToolError(`${matches.length} keys are named "${name}" (fingerprints ${fingerprints}); revoke one with --fingerprint`);
    }
  }
  const match = matches[0]!;
  if (document.keys.size === 1) {
    throw new KeysToolError('refusing to revoke the only key: the service rejects an empty key set and would keep serving it');
  }
  const { [match]: _removed, ...rest } = document.json['partner-keys'];
  const digest = entryDigest(match);
  return {
    text: serialize({ ...document.json, 'partner-keys': rest }),
    removed: document.keys.get(digest)!,
    fingerprint: fingerprintOf(digest),
  };
}

/** One row per entry for `list`: never a key, only its fingerprint. */
export function describeEntries(keys: KeySet, now = Date.now()): string[][] {
  return [...keys].map(([digest, entry]) => [
    fingerprintOf(digest),
    entry.partner.name,
    entry.partner.networkId,
    entry.expiresAt === undefined ? 'never' : `${rfc3339Utc(entry.expiresAt)}${entry.expiresAt <= now ? ' (expired)' : ''}`,
    entry.stored === 'hashed' ? 'hashed' : `raw${entry.weakness ? ` (${entry.weakness})` : ''}`,
    entry.partner.apiVersion ?? 'default',
  ]);
}

/** A moment as RFC 3339 in UTC, without milliseconds when there are none: `2027-01-31T00:00:00Z`. */
export function rfc3339Utc(epochMs: number): string {
  return new Date(epochMs).toISOString().replace('.000Z', 'Z');
}

function serialize(json: unknown): string {
  const text = `${JSON.stringify(json, null, 2)}\n`;
  parseKeySet(text); // never write what the service would reject
  return text;
}
