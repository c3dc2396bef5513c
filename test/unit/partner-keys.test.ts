import { describe, expect, it } from 'vitest';
import { hashKey, InvalidKeySetError, PartnerKeyStore, parseKeySet } from '../../src/auth/partner-keys.js';
import { newApiKey } from '../support/data.js';

const networkId = '6f9619ff-8b86-4d01-b42d-00cf4fc964ff';

describe('parsing the partner-keys secret', () => {
  it('maps the hash of each key to its network and name, keeping no key', () => {
    const key = newApiKey();
    const keys = parseKeySet(JSON.stringify({ 'partner-keys': { [key]: { networkId, name: 'Acme' } } }));
    expect([...keys.entries()]).toEqual([[hashKey(key), { networkId, name: 'Acme' }]]);
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
