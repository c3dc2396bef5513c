import { randomUUID } from 'node:crypto';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isIssuedKey } from '../../src/auth/issued-key.js';
import { hashKey, PartnerKeyStore, parseKeySet } from '../../src/auth/partner-keys.js';
import { keySetFile } from '../../src/keys/key-set-file.js';
import { runKeysTool } from '../../src/keys/tool.js';

/** The keys tool in-process against a key set file; what it prints is captured. */
async function keys(...argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runKeysTool(argv, { stdout: (t) => out.push(t), stderr: (t) => err.push(t) });
  return { code, stdout: out.join(''), stderr: err.join('') };
}

let directory: string;
let file: string;
const networkId = randomUUID();
beforeEach(() => {
  directory = mkdtempSync(join(tmpdir(), 'pas-keys-tool-'));
  file = join(directory, 'partner-keys.json');
});
afterEach(() => rmSync(directory, { recursive: true, force: true }));

const issue = (name: string, ...more: string[]) => keys('issue', '--file', file, '--network', networkId, '--name', name, ...more);
const served = () => {
  const store = new PartnerKeyStore();
  store.replace(parseKeySet(readFileSync(file, 'utf8')));
  return store;
};

describe('issue', () => {
  it('adds a hashed entry by default and prints the key once, on stdout only', async () => {
    const { code, stdout, stderr } = await issue('acme-2026-11');
    expect(code).toBe(0);
    const key = stdout.trim();
    expect(isIssuedKey(key)).toBe(true);
    expect(stderr.split('\n').filter(Boolean)).toHaveLength(1);
    expect(stderr).toContain(`issued "acme-2026-11" (fingerprint ${hashKey(key).slice(0, 12)}) for network ${networkId}`);
    expect(stderr).not.toContain(key);
    const text = readFileSync(file, 'utf8');
    expect(text).not.toContain(key);
    expect(JSON.parse(text)['partner-keys']).toEqual({ [`sha256:${hashKey(key)}`]: { networkId, name: 'acme-2026-11' } });
    expect(served().lookup(key)).toEqual({ networkId, name: 'acme-2026-11' });
    expect(statSync(file).mode & 0o777).toBe(0o600);
  });

  it('stores the key itself with --raw, and an expiry with --expires-at', async () => {
    const { stdout } = await issue('raw-one', '--raw', '--expires-at', '2099-01-31T00:00:00+01:00');
    const key = stdout.trim();
    expect(JSON.parse(readFileSync(file, 'utf8'))['partner-keys'][key]).toEqual({
      networkId,
      name: 'raw-one',
      expiresAt: '2099-01-30T23:00:00Z',
    });
  });

  it('pins the key to an API version with --api-version, which the service reads and list shows', async () => {
    const { code, stdout, stderr } = await issue('pinned', '--api-version', '2026-12-01');
    expect(code).toBe(0);
    expect(stderr).toContain('pinned to API version 2026-12-01');
    const key = stdout.trim();
    expect(JSON.parse(readFileSync(file, 'utf8'))['partner-keys'][`sha256:${hashKey(key)}`]).toEqual({
      networkId,
      name: 'pinned',
      apiVersion: '2026-12-01',
    });
    expect(served().lookup(key)).toEqual({ networkId, name: 'pinned', apiVersion: '2026-12-01' });
    const listing = (await keys('list', '--file', file)).stdout.split('\n')[1];
    expect(listing?.split(/\s{2,}/)).toEqual([hashKey(key).slice(0, 12), 'pinned', networkId, 'never', 'hashed', '2026-12-01']);
  });

  it('keeps entries and fields it does not know, and leaves no temporary file behind', async () => {
    writeFileSync(
      file,
      JSON.stringify({ 'partner-keys': { 'legacy-key-0123456789': { networkId, name: 'legacy', note: 'kept' } }, other: 1 }),
    );
    await issue('new-one');
    const document = JSON.parse(readFileSync(file, 'utf8'));
    expect(document.other).toBe(1);
    expect(document['partner-keys']['legacy-key-0123456789']).toEqual({ networkId, name: 'legacy', note: 'kept' });
    expect(readdirSync(directory)).toEqual(['partner-keys.json']);
  });

  it('lands every one of four concurrent runs', async () => {
    const results = await Promise.all(Array.from({ length: 4 }, (_, i) => issue(`concurrent-${i}`)));
    expect(results.map((r) => r.code)).toEqual([0, 0, 0, 0]);
    const store = served();
    expect(store.size).toBe(4);
    for (const { stdout } of results) expect(store.lookup(stdout.trim())).toBeDefined();
  });
});

describe('a change made by someone else between the read and the write', () => {
  it('is kept: the edit is made again on top of it', async () => {
    await issue('first');
    const before = readFileSync(file, 'utf8');
    const foreign = JSON.stringify({
      'partner-keys': { ...JSON.parse(before)['partner-keys'], 'hand-edited-key-0123456789': { networkId, name: 'by hand' } },
    });
    let edits = 0;
    await keySetFile(file).update((current) => {
      if (++edits === 1) writeFileSync(file, foreign); // another writer, after our read
      const document = JSON.parse(current ?? '{}');
      document['partner-keys'][`sha256:${hashKey('x'.repeat(40))}`] = { networkId, name: 'tool' };
      return JSON.stringify(document);
    });
    expect(edits).toBe(2);
    const names = [...parseKeySet(readFileSync(file, 'utf8')).values()].map((e) => e.partner.name).sort();
    expect(names).toEqual(['by hand', 'first', 'tool']);
  });
});

describe('list', () => {
  it('shows fingerprint, name, network, expiry, storage and API version of each key, never a key', async () => {
    const hashed = (await issue('hashed-one', '--expires-at', '2099-01-01T00:00:00Z')).stdout.trim();
    const raw = (await issue('raw-one', '--raw')).stdout.trim();
    const { code, stdout, stderr } = await keys('list', '--file', file);
    expect(code).toBe(0);
    const rows = stdout.trim().split('\n');
    expect(rows[0]).toMatch(/^FINGERPRINT\s+NAME\s+NETWORK\s+EXPIRES\s+STORED\s+API VERSION$/);
    expect(rows[1]?.split(/\s{2,}/)).toEqual([
      hashKey(hashed).slice(0, 12),
      'hashed-one',
      networkId,
      '2099-01-01T00:00:00Z',
      'hashed',
      'default',
    ]);
    expect(rows[2]?.split(/\s{2,}/)).toEqual([hashKey(raw).slice(0, 12), 'raw-one', networkId, 'never', 'raw', 'default']);
    expect(stderr).toBe(`2 keys in file ${file} (1 hashed, 1 raw); nothing changed\n`);
    expect(stdout + stderr).not.toContain(raw);
    expect(stdout + stderr).not.toContain(hashKey(raw));
  });

  it('marks raw keys that are short or not in the issued format, and expired keys', async () => {
    writeFileSync(
      file,
      JSON.stringify({
        'partner-keys': {
          'short-key-0123456': { networkId, name: 'short' },
          'an-old-format-key-0123456789abcdef': { networkId, name: 'old', expiresAt: '2020-01-01T00:00:00Z' },
        },
      }),
    );
    const { stdout } = await keys('list', '--file', file);
    expect(stdout).toMatch(/short\s+\S+\s+never\s+raw \(short\)/);
    expect(stdout).toMatch(/old\s+\S+\s+2020-01-01T00:00:00Z \(expired\)\s+raw \(unformatted\)/);
  });
});

describe('the file written', () => {
  it('is 0600 after issue --raw on a 0644 file, with the same owner', async () => {
    await issue('first');
    chmodSync(file, 0o644);
    const before = statSync(file);
    const { code, stdout } = await issue('second', '--raw');
    expect(code).toBe(0);
    expect(readFileSync(file, 'utf8')).toContain(stdout.trim());
    const after = statSync(file);
    expect(after.mode & 0o777).toBe(0o600);
    expect([after.uid, after.gid]).toEqual([before.uid, before.gid]);
    expect(after.ino).not.toBe(before.ino); // a new file, renamed over the old one
  });
});

describe('rotation: several keys under one name', () => {
  it('issues a second key under a name in the set, lists both apart, and revokes one by fingerprint only', async () => {
    const old = (await issue('acme')).stdout.trim();
    const issued = await issue('acme', '--raw');
    expect(issued.code).toBe(0);
    expect(issued.stderr).toMatch(/ 2 keys are now named "acme"; revoke the old one with --fingerprint\.\n$/);
    const fresh = issued.stdout.trim();
    expect(served().lookup(old)).toEqual({ networkId, name: 'acme' });
    expect(served().lookup(fresh)).toEqual({ networkId, name: 'acme' });

    const { stdout: listing } = await keys('list', '--file', file);
    const rows = listing.split('\n').filter((line) => /\sacme\s/.test(line));
    expect(rows.map((row) => row.split(/\s+/)[0]).sort()).toEqual([hashKey(old), hashKey(fresh)].map((d) => d.slice(0, 12)).sort());
    expect(listing).not.toContain(fresh);

    const before = readFileSync(file, 'utf8');
    const byName = await keys('revoke', '--file', file, '--name', 'acme');
    expect(byName.code).toBe(1);
    expect(byName.stderr).toBe(
      `keys: 2 keys are named "acme" (fingerprints ${hashKey(old).slice(0, 12)}, ${hashKey(fresh).slice(0, 12)}); revoke one with --fingerprint\n`,
    );
    expect(readFileSync(file, 'utf8')).toBe(before);

    const byFingerprint = await keys('revoke', '--file', file, '--fingerprint', hashKey(old).slice(0, 12));
    expect(byFingerprint.stderr).toMatch(new RegExp(`^revoked "acme" \\(fingerprint ${hashKey(old).slice(0, 12)}\\) `));
    expect(served().lookup(old)).toBeUndefined();
    expect(served().lookup(fresh)).toEqual({ networkId, name: 'acme' });
  });

  it('revokes by name while the name is unique', async () => {
    await issue('keep');
    const gone = (await issue('gone')).stdout.trim();
    const { code, stderr } = await keys('revoke', '--file', file, '--name', 'gone');
    expect(code).toBe(0);
    expect(stderr).toMatch(new RegExp(`^revoked "gone" \\(fingerprint ${hashKey(gone).slice(0, 12)}\\) `));
    expect(served().lookup(gone)).toBeUndefined();
  });
});

describe('revoke', () => {
  it('removes the key with the fingerprint, and says which one in one line', async () => {
    const first = (await issue('first')).stdout.trim();
    const second = (await issue('second', '--raw')).stdout.trim();
    const { code, stdout, stderr } = await keys('revoke', '--file', file, '--fingerprint', hashKey(second).slice(0, 12).toUpperCase());
    expect(code).toBe(0);
    expect(stdout).toBe('');
    expect(stderr).toMatch(
      new RegExp(`^revoked "second" \\(fingerprint ${hashKey(second).slice(0, 12)}\\) of network ${networkId} from file .*\\n$`),
    );
    expect(served().lookup(second)).toBeUndefined();
    expect(served().lookup(first)).toBeDefined();
    expect(readFileSync(file, 'utf8')).not.toContain(second);
  });
});

describe('bad input: one line, a non-zero exit, and nothing changed', () => {
  const cases: Array<[string, string[], RegExp, number]> = [
    ['no command', ['--file', 'F'], /^keys: a command is required/, 2],
    ['an unknown command', ['rotate', '--file', 'F'], /^keys: unknown command "rotate"/, 2],
    ['no key source', ['list'], /exactly one of --file and --secret-id/, 2],
    ['both key sources', ['list', '--file', 'F', '--secret-id', 's'], /exactly one of --file and --secret-id/, 2],
    ['an unknown option', ['list', '--file', 'F', '--force'], /unknown option --force/, 2],
    ['an option of another command', ['list', '--file', 'F', '--name', 'x'], /--name does not go with list/, 2],
    ['a missing --name', ['issue', '--file', 'F', '--network', randomUUID()], /issue needs --network and --name/, 2],
    ['a flag without its value', ['issue', '--file', 'F', '--name', 'x', '--network'], /--network needs a value/, 2],
    ['an empty value', ['issue', '--file', 'F', '--network', randomUUID(), '--name', ''], /--name needs a value/, 2],
    ['a bad network', ['issue', '--file', 'F', '--network', 'acme', '--name', 'x'], /--network must be a UUID, got "acme"/, 1],
    ['an empty name', ['issue', '--file', 'F', '--network', randomUUID(), '--name', ' '], /--name must be 1 to 128 characters/, 1],
    [
      'a date without an offset',
      ['issue', '--file', 'F', '--network', randomUUID(), '--name', 'x', '--expires-at', '2099-01-01T00:00:00'],
      /RFC 3339/,
      1,
    ],
    [
      'a date that does not exist',
      ['issue', '--file', 'F', '--network', randomUUID(), '--name', 'x', '--expires-at', '2099-02-30T00:00:00Z'],
      /RFC 3339/,
      1,
    ],
    [
      'a date in the past',
      ['issue', '--file', 'F', '--network', randomUUID(), '--name', 'x', '--expires-at', '2020-01-01T00:00:00Z'],
      /is not in the future/,
      1,
    ],
    [
      'an API version that does not exist',
      ['issue', '--file', 'F', '--network', randomUUID(), '--name', 'x', '--api-version', '2026-11-22'],
      /--api-version must be one of the API versions: 2026-11-21, 2026-12-01/,
      1,
    ],
    ['revoke without a key named', ['revoke', '--file', 'F'], /revoke needs --fingerprint or --name/, 2],
    ['revoke naming a key twice', ['revoke', '--file', 'F', '--name', 'taken', '--fingerprint', '000000'], /one of them/, 2],
    ['an unknown name', ['revoke', '--file', 'F', '--name', 'nobody'], /no key in file .* is named "nobody"/, 1],
    ['a fingerprint that is not hex', ['revoke', '--file', 'F', '--fingerprint', 'xyz123'], /--fingerprint must be 6 to 64 hex digits/, 1],
    [
      'an unknown fingerprint',
      ['revoke', '--file', 'F', '--fingerprint', '000000000000'],
      /no key in file .* has fingerprint 000000000000/,
      1,
    ],
  ];
  for (const [what, argv, message, exit] of cases) {
    it(what, async () => {
      const { stdout: key } = await issue('taken');
      const { stdout: other } = await issue('other');
      // never matches 000000000000 unless a digest happens to start so (1 in 2^48)
      const before = readFileSync(file, 'utf8');
      const result = await keys(...argv.map((a) => (a === 'F' ? file : a)));
      expect(result.code).toBe(exit);
      expect(result.stderr).toMatch(message);
      expect(result.stderr.trim().split('\n')).toHaveLength(1);
      expect(result.stdout).toBe('');
      expect(readFileSync(file, 'utf8')).toBe(before);
      expect(result.stderr).not.toContain(key.trim());
      expect(result.stderr).not.toContain(other.trim());
    });
  }

  it('refuses to revoke the only key: the service would keep serving it', async () => {
    const { stdout } = await issue('alone');
    const before = readFileSync(file, 'utf8');
    const result = await keys('revoke', '--file', file, '--fingerprint', hashKey(stdout.trim()).slice(0, 12));
    expect(result).toMatchObject({ code: 1, stderr: expect.stringMatching(/refusing to revoke the only key/) });
    expect(readFileSync(file, 'utf8')).toBe(before);
  });

  it('refuses a fingerprint that matches two keys', async () => {
    let pair: [string, string] | undefined;
    const seen = new Map<string, string>();
    writeFileSync(file, '{"partner-keys": {}}');
    // Two made-up raw keys whose digests share their first 6 hex digits.
    for (let i = 0; !pair; i++) {
      const candidate = `made-up-key-${i}-0123456789`;
      const prefix = hashKey(candidate).slice(0, 6);
      const twin = seen.get(prefix);
      if (twin) pair = [twin, candidate];
      else seen.set(prefix, candidate);
    }
    const [a, b] = pair;
    writeFileSync(
      file,
      JSON.stringify({
        'partner-keys': { [a]: { networkId, name: 'a' }, [b]: { networkId, name: 'b' }, [`${a}x`]: { networkId, name: 'c' } },
      }),
    );
    const before = readFileSync(file, 'utf8');
    const result = await keys('revoke', '--file', file, '--fingerprint', hashKey(a).slice(0, 6));
    expect(result).toMatchObject({ code: 1, stderr: expect.stringMatching(/matches 2 keys; give more of its digits/) });
    expect(readFileSync(file, 'utf8')).toBe(before);
  });

  it('refuses to change a set the service would reject, naming the entry, never the key', async () => {
    writeFileSync(
      file,
      JSON.stringify({ 'partner-keys': { 'bad-expiry-key-0123456789': { networkId, name: 'broken', expiresAt: 'soon' } } }),
    );
    const before = readFileSync(file, 'utf8');
    const result = await issue('new');
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^keys: the key set in file .* is invalid \(entry 1 \("broken"\): expiresAt must be .*\); fix it first/);
    expect(result.stderr).not.toContain('bad-expiry-key');
    expect(readFileSync(file, 'utf8')).toBe(before);
  });

  it('says so when there is no file to list', async () => {
    expect(await keys('list', '--file', join(directory, 'none.json'))).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(/no key set at/),
    });
  });
});

describe('check: confirming a secret scanner finding offline', () => {
  async function check(input: string, ...argv: string[]) {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runKeysTool(['check', ...argv], {
      stdout: (t) => out.push(t),
      stderr: (t) => err.push(t),
      stdin: async () => input,
    });
    return { code, stdout: out.join(''), stderr: err.join('') };
  }

  it('prints the fingerprint of each pas_ string and whether its checksum is right, never the key', async () => {
    const real = (await issue('leaked')).stdout.trim();
    const lookalike = real.slice(0, -1) + (real.endsWith('0') ? '1' : '0');
    const { code, stdout, stderr } = await check(`config:\n  key: ${real}\nother: "${lookalike}" pas_tooshort\n`);
    expect(code).toBe(0);
    expect(stdout).toBe(
      `${hashKey(real).slice(0, 12)}  checksum right: an issued key\n${hashKey(lookalike).slice(0, 12)}  checksum wrong: not an issued key\n`,
    );
    expect(stderr).toBe('2 pas_ strings read, 1 with a right checksum; nothing changed\n');
    expect(stdout + stderr).not.toContain(real);
    // the fingerprint it prints is the one revoke takes
    await issue('other');
    expect((await keys('revoke', '--file', file, '--fingerprint', stdout.slice(0, 12))).code).toBe(0);
  });

  it('exits 1 when no string has a right checksum, and takes no key source', async () => {
    expect((await check('nothing here')).code).toBe(1);
    expect(await check('', '--file', 'x')).toMatchObject({ code: 2, stderr: expect.stringMatching(/check reads stdin, not a key set/) });
  });
});
