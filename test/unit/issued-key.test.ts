import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { isIssuedKey, issueKey } from '../../src/auth/issued-key.js';

describe('the issued key format', () => {
  it('is pas_, 32 random Base62 characters and a 6-character checksum', () => {
    for (let i = 0; i < 1_000; i++) {
      const key = issueKey();
      expect(key).toMatch(/^pas_[0-9A-Za-z]{38}$/);
      expect(isIssuedKey(key)).toBe(true);
    }
  });

  it('draws every Base62 character about equally often (no modulo bias), and never repeats a key', () => {
    const counts = new Map<string, number>();
    const keys = new Set<string>();
    for (let i = 0; i < 5_000; i++) {
      const key = issueKey();
      keys.add(key);
      for (const c of key.slice(4, 36)) counts.set(c, (counts.get(c) ?? 0) + 1);
    }
    expect(keys.size).toBe(5_000);
    expect(counts.size).toBe(62);
    const expected = (5_000 * 32) / 62;
    for (const count of counts.values()) expect(Math.abs(count - expected) / expected).toBeLessThan(0.15);
  });

  it('tells an issued key from one with a character changed, a wrong prefix or a random string', () => {
    const key = issueKey();
    for (let position = 4; position < key.length; position++) {
      const other = key[position] === 'Z' ? 'Y' : 'Z';
      expect(isIssuedKey(key.slice(0, position) + other + key.slice(position + 1))).toBe(false);
    }
    expect(isIssuedKey(`pat_${key.slice(4)}`)).toBe(false);
    expect(isIssuedKey(`${key}0`)).toBe(false);
    let falsePositives = 0;
    for (let i = 0; i < 10_000; i++) {
      if (
        isIssuedKey(
          `pas_${randomBytes(40)
            .toString('base64')
            .replace(/[^0-9A-Za-z]/g, '')
            .slice(0, 38)}`,
        )
      )
        falsePositives++;
    }
    expect(falsePositives).toBe(0);
  });
});
