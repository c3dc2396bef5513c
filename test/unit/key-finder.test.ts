import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { issueKey } from '../../src/auth/issued-key.js';
import { hashKey, PartnerKeyStore, parseKeySet } from '../../src/auth/partner-keys.js';
import { fingerprintKey, holdsKnownKey, KeyFinder, redactKnownKeys } from '../../src/observability/key-finder.js';
import { urls } from '../support/partner.js';
import { slowOnes, worstCaseInputs } from '../support/worst-case.js';

const networkId = '8d2f6a4c-1b3e-4f5a-9c7d-0e1f2a3b4c5d';

/** A store holding these keys, raw or hashed; made at run time, never written anywhere. */
function storeOf(entries: Array<{ key: string; hashed?: boolean }>): PartnerKeyStore {
  const store = new PartnerKeyStore();
  const document = Object.fromEntries(
    entries.map(({ key, hashed }, i) => [hashed ? `sha256:${hashKey(key)}` : key, { networkId, name: `partner-${i}` }]),
  );
  store.replace(parseKeySet(JSON.stringify({ 'partner-keys': document })));
  return store;
}

describe('a loaded key is found wherever it stands in a text', () => {
  // Not the issued format, and with characters a URL or a header splits on.
  const raw = `legacy/${randomBytes(18).toString('base64')}=;x`;
  const issued = issueKey();
  const store = storeOf([{ key: raw }, { key: issued }]);

  it.each([
    ['a path', (k: string) => urls.agentStatus(k)],
    ['a user agent', (k: string) => `client/${k}`],
    ['glued to other characters', (k: string) => `xx${k}yy`],
    ['a JSON log line', (k: string) => `{"msg":"x","path":"/a${k}b"}`],
    ['twice', (k: string) => `${k} and ${k}`],
  ])('in %s', (_where, place) => {
    for (const key of [raw, issued]) {
      const text = place(key);
      expect(holdsKnownKey(text)).toBe(true);
      expect(redactKnownKeys(text)).not.toContain(key);
      expect(redactKnownKeys(text)).toContain('REDACTED');
    }
  });

  it('leaves texts without a key alone (the same string)', () => {
    const text = `/partner/agents/us-east-1:${'a'.repeat(8)}/status ${issueKey()} ${raw.slice(1)}`;
    expect(redactKnownKeys(text)).toBe(text);
    expect(store.size).toBe(2);
  });

  it('finds a key with characters JSON escapes in a JSON line, escaped', () => {
    const quoted = `q"${randomBytes(18).toString('base64')}\\x`;
    storeOf([{ key: quoted }]);
    const line = JSON.stringify({ msg: 'x', path: `/a/${quoted}/b` });
    expect(line).not.toContain(quoted);
    expect(redactKnownKeys(line)).not.toContain(JSON.stringify(quoted).slice(1, -1));
    expect(holdsKnownKey(`/a/${quoted}/b`)).toBe(true);
  });

  it('finds a hashed entry delimited as a token before it is used, and anywhere once it authenticated', () => {
    const hashed = `pk_live_${randomBytes(24).toString('base64url')}`;
    const hashedStore = storeOf([{ key: hashed, hashed: true }]);
    expect(holdsKnownKey(`/partner/${hashed}/x`)).toBe(true);
    expect(holdsKnownKey(`zz${hashed}zz`)).toBe(false);
    expect(hashedStore.lookup(hashed)?.name).toBe('partner-0');
    expect(holdsKnownKey(`zz${hashed}zz`)).toBe(true);
  });
});

describe('the search is linear in the text', () => {
  it('checks a 16 KiB worst case in under 5 ms, with keys of several lengths and a hashed entry not used yet', () => {
    // One finder, as the service has (a test process registers one per store it makes).
    const finder = new KeyFinder();
    const raw = [issueKey(), randomBytes(12).toString('hex'), randomBytes(48).toString('base64')];
    finder.replace(
      [...raw.map(hashKey), hashKey(`pk_live_${randomBytes(24).toString('base64url')}`)],
      raw.map((key) => fingerprintKey(key)),
    );
    const inputs = worstCaseInputs(['', 'pas_', 'a.b/c+d=e~f_g-h']);
    expect(slowOnes((input) => finder.find(input), inputs)).toEqual([]);
  });
});
