import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { RE2 } from 're2-wasm';
import { parse } from 'smol-toml';
import { afterAll, describe, expect, it } from 'vitest';
import { isIssuedKey, issueKey, keyShapedStrings } from '../../src/auth/issued-key.js';

/**
 * The scanner rules shipped in the repository (.gitleaks.toml, .secretlintrc.json) against keys
 * made at run time. gitleaks cannot be installed here, so its rule is read from the TOML file and
 * compiled with RE2 (the engine gitleaks uses) and with JavaScript's RegExp; secretlint runs for
 * real, as a CI job would run it.
 */
const run = promisify(execFile);
const directory = mkdtempSync(join(tmpdir(), 'pas-scan-'));
afterAll(() => rmSync(directory, { recursive: true, force: true }));

const base62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const randomBase62 = (length: number) => Array.from(randomBytes(length), (byte) => base62[byte % 62]).join('');
/** An issued key with one checksum character changed: the right shape, not a real key. */
const wrongChecksum = (key: string) => key.slice(0, -1) + (key.endsWith('0') ? '1' : '0');

/** Where leaked keys end up: config files, environment files, URLs, code, logs. */
const contexts = [
  (key: string) => `{"apiKey": "${key}"}`,
  (key: string) => `partner:\n  api_key: ${key}\n`,
  (key: string) => `PARTNER_API_KEY=${key}`,
  (key: string) => `https://example.com/partner/agents?key=${key}&x=1`,
  (key: string) => `const key = '${key}';`,
  (key: string) => `curl -H "x-api-key: ${key}" https://partner-api.example.com`,
  (key: string) => `token:${key}\tnext`,
];
const keys = Array.from({ length: 1_000 }, () => issueKey());
const withKeys = keys.map((key, i) => contexts[i % contexts.length]!(key)).join('\n');
/** Strings that must not be found: no prefix, another prefix, a wrong length, the docs' placeholder. */
const lookalikes = [
  ...Array.from({ length: 300 }, () => randomBase62(42)),
  ...Array.from({ length: 300 }, () => `key_${randomBase62(38)}`),
  ...Array.from({ length: 100 }, () => `pas_${randomBase62(37)}`),
  ...Array.from({ length: 100 }, () => `pas_${randomBase62(39)}`),
  ...Array.from({ length: 100 }, () => randomBytes(32).toString('base64')),
  ...Array.from({ length: 100 }, () => `sha256:${randomBytes(32).toString('hex')}`),
].join('\n');

function shannonEntropy(text: string): number {
  const counts = new Map<string, number>();
  for (const c of text) counts.set(c, (counts.get(c) ?? 0) + 1);
  let bits = 0;
  for (const count of counts.values()) bits -= (count / text.length) * Math.log2(count / text.length);
  return bits;
}

describe('the gitleaks rule (.gitleaks.toml)', () => {
  const config = parse(readFileSync('.gitleaks.toml', 'utf8')) as {
    extend?: { useDefault?: boolean };
    rules: Array<{ id: string; regex: string; keywords: string[]; entropy: number }>;
  };
  const rule = config.rules.find((r) => r.id === 'partner-agent-status-api-key')!;
  const engines = { RE2: new RE2(rule.regex, 'gu'), RegExp: new RegExp(rule.regex, 'g') };
  /** Every match, in order (re2-wasm has no Symbol.matchAll, so both engines go through exec). */
  const matches = (regex: { exec(text: string): { [index: number]: string | undefined } | null; lastIndex: number }, text: string) => {
    const found: string[] = [];
    regex.lastIndex = 0;
    for (let m = regex.exec(text); m !== null; m = regex.exec(text)) found.push(m[0] ?? '');
    return found;
  };

  it('keeps the default rules and has a keyword that every match contains', () => {
    expect(config.extend?.useDefault).toBe(true);
    expect(rule.keywords).toEqual(['pas_']);
  });

  for (const [engine, regex] of Object.entries(engines)) {
    it(`finds each of 1,000 generated keys in JSON, YAML, .env, URLs, code and headers (${engine})`, () => {
      const found = matches(regex, withKeys);
      expect(found.length).toBe(keys.length);
      expect(found.every((key, i) => key === keys[i])).toBe(true);
    });

    it(`finds nothing in random strings, other prefixes, wrong lengths or digests (${engine})`, () => {
      expect(matches(regex, lookalikes)).toEqual([]);
    });
  }

  it('matches what `keys check` looks for, so that the tool can confirm each finding', () => {
    expect(keyShapedStrings(withKeys).join('\n') === keys.join('\n')).toBe(true);
    expect(keyShapedStrings(lookalikes)).toEqual([]);
  });

  it('passes the entropy threshold with every generated key, and not with a placeholder', () => {
    expect(Math.min(...keys.map(shannonEntropy))).toBeGreaterThan(rule.entropy);
    expect(shannonEntropy('pas_EXAMPLEEXAMPLEEXAMPLEEXAMPLEEXAMPLE00')).toBeLessThan(rule.entropy);
  });

  it('cannot check the checksum: a key with a wrong one matches the rule, and only isIssuedKey tells it apart', () => {
    const fake = wrongChecksum(issueKey());
    expect(new RegExp(rule.regex).test(fake)).toBe(true);
    expect(isIssuedKey(fake)).toBe(false);
  });
});

describe('the secretlint configuration (.secretlintrc.json), run with the secretlint CLI', () => {
  async function secretlint(files: Record<string, string>) {
    for (const [name, content] of Object.entries(files)) writeFileSync(join(directory, name), content);
    const paths = Object.keys(files).map((name) => join(directory, name));
    const result = await run(
      process.execPath,
      ['node_modules/secretlint/bin/secretlint.js', '--secretlintrc', '.secretlintrc.json', '--format', 'json', ...paths],
      {
        maxBuffer: 64 * 1024 * 1024,
      },
    ).then(
      ({ stdout }) => ({ code: 0, stdout }),
      (error: { code: number; stdout: string }) => ({ code: error.code, stdout: error.stdout }),
    );
    const report = JSON.parse(result.stdout) as Array<{ filePath: string; messages: Array<{ ruleId: string; range: [number, number] }> }>;
    return { code: result.code, report };
  }

  it('finds every generated key, exits 1, and masks the keys in its report', async () => {
    const { code, report } = await secretlint({ 'leaked.txt': withKeys });
    expect(code).toBe(1);
    const messages = report.flatMap((file) => file.messages);
    expect(messages.every((m) => m.ruleId === '@secretlint/secretlint-rule-pattern')).toBe(true);
    const found = messages.map((m) => withKeys.slice(m.range[0], m.range[1]));
    expect(found.length).toBe(keys.length);
    expect(found.every((key, i) => key === keys[i])).toBe(true);
    const printed = JSON.stringify(report.map((file) => file.messages));
    expect(keys.some((key) => printed.includes(key))).toBe(false);
  });

  it('finds nothing in random strings and lookalikes, and exits 0', async () => {
    const { code, report } = await secretlint({ 'clean.txt': lookalikes });
    expect(report.flatMap((file) => file.messages)).toEqual([]);
    expect(code).toBe(0);
  });

  it('finds keys with a wrong checksum too: a pattern sees the shape only', async () => {
    const fakes = Array.from({ length: 20 }, () => wrongChecksum(issueKey()));
    const { report } = await secretlint({ 'fakes.env': fakes.map((fake) => `KEY=${fake}`).join('\n') });
    expect(report.flatMap((file) => file.messages)).toHaveLength(20);
    expect(fakes.filter(isIssuedKey)).toEqual([]);
  });
});
