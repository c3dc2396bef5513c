import { createHash } from 'node:crypto';

/** Who is calling: the record a partner key is bound to (specification section 2, API key record). */
export interface Partner {
  networkId: string;
  name: string;
}

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
// Keys are opaque strings issued by the operator; refuse ones too short to be secret or odd enough
// to be a paste mistake (whitespace, control characters).
const keyPattern = /^[\x21-\x7e]{16,512}$/;

export class InvalidKeySetError extends Error {
  override readonly name = 'InvalidKeySetError';
}

/** A parsed, valid key set: SHA-256 of each key to its partner. The keys themselves are not kept. */
export type KeySet = ReadonlyMap<string, Partner>;

export function hashKey(apiKey: string): string {
  return createHash('sha256').update(apiKey).digest('hex');
}

/**
 * Parses the secret's JSON, `{"partner-keys": {"<API_KEY>": {"networkId", "name"}}}`. Any bad entry
 * makes the whole set invalid, so a half-broken rotation never silently drops partners. Error
 * messages name entries by position and partner label, never by key.
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

  const keys = new Map<string, Partner>();
  entries.forEach(([apiKey, record], index) => {
    const where = `entry ${index + 1}${isObject(record) && typeof record.name === 'string' ? ` ("${record.name}")` : ''}`;
    if (!keyPattern.test(apiKey)) {
      throw new InvalidKeySetError(`${where}: key must be 16 to 512 printable characters without spaces`);
    }
    if (!isObject(record)) throw new InvalidKeySetError(`${where}: record must be an object`);
    const { networkId, name } = record;
    if (typeof networkId !== 'string' || !uuidPattern.test(networkId)) {
      throw new InvalidKeySetError(`${where}: networkId must be a UUID`);
    }
    if (typeof name !== 'string' || name.trim() === '' || name.length > 128) {
      throw new InvalidKeySetError(`${where}: name must be a non-empty string of at most 128 characters`);
    }
    keys.set(hashKey(apiKey), { networkId: networkId.toLowerCase(), name });
  });
  return keys;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The key set the service serves. Lookups hash the presented key and read a Map, so the time taken
 * does not depend on how much of a key matches. A reload replaces the whole set at once; a bad
 * reload leaves the last good set in place (the caller reports it).
 */
export class PartnerKeyStore {
  #keys: KeySet | undefined;

  get loaded(): boolean {
    return this.#keys !== undefined;
  }

  get size(): number {
    return this.#keys?.size ?? 0;
  }

  replace(keys: KeySet): void {
    this.#keys = keys;
  }

  lookup(apiKey: string): Partner | undefined {
    return this.#keys?.get(hashKey(apiKey));
  }
}
