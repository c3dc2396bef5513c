import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { issueKey } from '../../src/auth/issued-key.js';
import { hashKey, InvalidKeySetError, PartnerKeyStore, parseKeySet } from '../../src/auth/partner-keys.js';
import { newApiKey } from '../support/data.js';

const networkId = '6f9619ff-8b86-4d01-b42d-00cf4fc964ff';
/** A key made before the issued format existed (made at run time, never committed). */
const legacyKey = () => `pk_live_${randomBytes(24).toString('base64url')}`;

describe('parsing the partner-keys secret', () => {
  it('maps the hash of each key to its network and name, keeping no key', () => {
    const key = legacyKey();
    const keys = parseKeySet(JSON.stringify({ 'partner-keys': { [key]: { networkId, name: 'Acme' } } }));
    expect([...keys.entries()]).toEqual([[hashKey(key), { partner: { networkId, name: 'Acme' }, stored: 'raw', weakness: 'unformatted' }]]);
    expect(JSON.stringify([...keys.entries()])).not.toContain(key);
  });

  const invalid: Array<[string, string, RegExp]> = [
    ['bad JSON', '{', /not valid JSON/],
    ['no partner-keys object', '{"keys": {}}', /no "partner-keys" object/],
    ['an empty set', '{"partner-keys": {}}', /holds no key/],
    ['a short key', JSON.stringify({ 'partner-keys': { short: { networkId, name: 'a' } } }), /entry 1 \("a"\): key must be 16 to 512/],
    ['a key with a space', JSON.stringify({ 'partner-keys': { 'abcdefgh ijklmnopq': { networkId, name: 'a' } } }), /key must be/],
    ['a bad networkId', JSON.stringify({ 'partner-keys': { [newApiKey()]: { networkId: 'n1', name: 'a' } } }), /networkId must be a UUID/],
    ['a missing name', JSON.stringify({ 'partner-keys': { [newApiKey()]: { networkId } } }), /entry 1: name must be/],
    ['a record that is not an object', JSON.stringify({ 'partner-keys': { [newApiKey()]: 'x' } }), /record must be an object/],
    [
      'a hashed entry in uppercase hex',
      JSON.stringify({ 'partner-keys': { [`sha256:${hashKey(newApiKey()).toUpperCase()}`]: { networkId, name: 'a' } } }),
      /entry 1 \("a"\): a hashed entry must be "sha256:" and 64 lowercase hex digits/,
    ],
    [
      'a hashed entry too short',
      JSON.stringify({ 'partner-keys': { [`sha256:${hashKey(newApiKey()).slice(1)}`]: { networkId, name: 'a' } } }),
      /a hashed entry must be/,
    ],
    [
      'an expiresAt that is not RFC 3339',
      JSON.stringify({ 'partner-keys': { [newApiKey()]: { networkId, name: 'a', expiresAt: '2027-01-31' } } }),
      /entry 1 \("a"\): expiresAt must be an RFC 3339 date-time/,
    ],
    [
      'an expiresAt on a day that does not exist',
      JSON.stringify({ 'partner-keys': { [newApiKey()]: { networkId, name: 'a', expiresAt: '2027-02-30T00:00:00Z' } } }),
      /expiresAt must be/,
    ],
    [
      'an expiresAt that is a number',
      JSON.stringify({ 'partner-keys': { [newApiKey()]: { networkId, name: 'a', expiresAt: 1 } } }),
      /expiresAt/,
    ],
    [
      'an apiVersion that is not a version (docs/interfaces.md §15)',
      JSON.stringify({ 'partner-keys': { [newApiKey()]: { networkId, name: 'a', apiVersion: '2026-12-02' } } }),
      /entry 1 \("a"\): apiVersion must be one of the API versions \(2026-11-21, 2026-12-01\)/,
    ],
  ];
  for (const [what, text, message] of invalid) {
    it(`rejects the whole set for ${what}`, () => {
      expect(() => parseKeySet(text)).toThrow(InvalidKeySetError);
      expect(() => parseKeySet(text)).toThrow(message);
    });
  }

  it('names a bad entry by position and label, never by its key', () => {
    const good = newApiKey();
    const bad = newApiKey();
    const text = JSON.stringify({ 'partner-keys': { [good]: { networkId, name: 'ok' }, [bad]: { networkId: 'x', name: 'Broken' } } });
    const message = 'entry 2 ("Broken"): networkId must be a UUID';
    expect(message).not.toContain(bad);
    expect(() => parseKeySet(text)).toThrow(new InvalidKeySetError(message));
  });
});

describe('hashed entries, expiry and weak keys', () => {
  it('accepts a key stored raw and another stored as its SHA-256, side by side', () => {
    const raw = issueKey();
    const hashed = issueKey();
    const keys = parseKeySet(
      JSON.stringify({
        'partner-keys': { [raw]: { networkId, name: 'raw' }, [`sha256:${hashKey(hashed)}`]: { networkId, name: 'hashed' } },
      }),
    );
    const store = new PartnerKeyStore();
    store.replace(keys);
    expect(store.lookup(raw)?.name).toBe('raw');
    expect(store.lookup(hashed)?.name).toBe('hashed');
    expect(keys.get(hashKey(raw))?.stored).toBe('raw');
    expect(keys.get(hashKey(hashed))?.stored).toBe('hashed');
    expect(store.lookup(`sha256:${hashKey(hashed)}`)).toBeUndefined();
  });

  it('rejects a set that holds one key both raw and hashed', () => {
    const key = issueKey();
    const text = JSON.stringify({
      'partner-keys': { [key]: { networkId, name: 'a' }, [`sha256:${hashKey(key)}`]: { networkId, name: 'b' } },
    });
    expect(() => parseKeySet(text)).toThrow(new InvalidKeySetError('entry 2 ("b"): the same key is in the set twice (raw and hashed)'));
  });

  it('refuses a key from its expiresAt on, and still knows it is a key', () => {
    const key = issueKey();
    const store = new PartnerKeyStore();
    store.replace(
      parseKeySet(JSON.stringify({ 'partner-keys': { [key]: { networkId, name: 'a', expiresAt: '2027-01-31T00:00:00+01:00' } } })),
    );
    const expiry = Date.parse('2027-01-30T23:00:00Z');
    expect(store.lookup(key, expiry - 1)?.name).toBe('a');
    expect(store.lookup(key, expiry)).toBeUndefined();
    expect(store.holds(key)).toBe(true);
  });

  it('flags raw keys that are short or not issued by the keys tool, and judges no hashed entry', () => {
    const short = 'abcdefghijklmnopqrstu';
    const flipped = issueKey().replace(/.$/, (c) => (c === 'a' ? 'b' : 'a'));
    const keys = parseKeySet(
      JSON.stringify({
        'partner-keys': {
          [issueKey()]: { networkId, name: 'issued' },
          [short]: { networkId, name: 'short' },
          [legacyKey()]: { networkId, name: 'other format' },
          [flipped]: { networkId, name: 'bad checksum' },
          [`sha256:${hashKey(issueKey())}`]: { networkId, name: 'hashed' },
        },
      }),
    );
    const weakness = Object.fromEntries([...keys.values()].map((e) => [e.partner.name, e.weakness]));
    expect(weakness).toEqual({
      issued: undefined,
      short: 'short',
      'other format': 'unformatted',
      'bad checksum': 'unformatted',
      hashed: undefined,
    });
  });
});

describe('the key store', () => {
  it('finds a partner by key, and nothing before a set is loaded or for another key', () => {
    const store = new PartnerKeyStore();
    const key = newApiKey();
    expect(store.loaded).toBe(false);
    expect(store.lookup(key)).toBeUndefined();
    store.replace(parseKeySet(JSON.stringify({ 'partner-keys': { [key]: { networkId, name: 'Acme' } } })));
    expect(store.loaded).toBe(true);
    expect(store.size).toBe(1);
    expect(store.lookup(key)).toEqual({ networkId, name: 'Acme' });
    expect(store.lookup(`${key}x`)).toBeUndefined();
    expect(store.lookup(key.slice(0, -1))).toBeUndefined();
  });
});
