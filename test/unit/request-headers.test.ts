import { randomBytes, randomInt } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { issueKey } from '../../src/auth/issued-key.js';
import { meetsExpectation, requestIdOf } from '../../src/http/request-headers.js';
import { slowOnes } from '../support/worst-case.js';

// The headers every request passes through (docs/interfaces.md §3): x-request-id and Expect.

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/**
 * `length` random characters of the Base64url alphabet without `-`. A random Base64url key has a
 * `-` in about one character of 64; when they happen to cut it into groups shorter than 16, the
 * shape rule does not see it (the documented limit below), so the key-shaped cases leave `-` out.
 */
function base64urlRun(length: number): string {
  return randomBytes(length).toString('base64url').replaceAll('-', '_').slice(0, length);
}

/** A string of an issued key's shape (prefix, length, alphabet) that is not a key: its checksum is random. */
function keyShaped(): string {
  const base62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
  return `pas_${Array.from({ length: 38 }, () => base62[randomInt(62)]).join('')}`;
}

describe('x-request-id', () => {
  it.each(['0f6b1d5e-8a43-4c27-b9e2-5d17c3a8f604', 'abc-123', 'svc.retry:2@eu/7+x=y', 'a'.repeat(15), `${'0123456789ab-'.repeat(9)}x`])(
    'keeps the sane id %j',
    (given) => {
      expect(requestIdOf(given)).toEqual({ id: given, keyShaped: false });
    },
  );

  it.each([
    ['absent', undefined],
    ['sent twice', ['a', 'b']],
    ['empty', ''],
    ['with a space', 'a b'],
    ['with a control character', 'a\u0007'],
    ['over 128 characters', 'abcdefgh-'.repeat(15)],
  ])('replaces an id that is %s, and counts nothing', (_, given) => {
    const { id, keyShaped } = requestIdOf(given);
    expect(id).toMatch(uuid);
    expect(keyShaped).toBe(false);
  });

  it.each([
    ['an issued key', issueKey()],
    ['a string of its shape', keyShaped()],
    ['a key inside an id', `req-${issueKey()}-1`],
    ['a Base64 key', randomBytes(24).toString('base64')],
    ['a Base64url key with a prefix', `pk_live_${base64urlRun(32)}`],
    ['16 key characters', 'a'.repeat(16)],
    ['a run among spaces (not sane)', `x ${'A'.repeat(16)} y`],
  ])('replaces %s, whether or not it is a loaded key, and says it was key-shaped', (_, given) => {
    const { id, keyShaped } = requestIdOf(given);
    expect(id).toMatch(uuid);
    expect(id).not.toBe(given);
    expect(keyShaped).toBe(true);
  });

  it('keeps a key made only of groups shorter than 16 between `-` (the documented limit of the shape rule)', () => {
    // docs/interfaces.md §3: such a legacy key is not recognised by its shape; issued keys always are.
    const given = `pk_live_${base64urlRun(5)}-${base64urlRun(15)}-${base64urlRun(15)}`;
    expect(requestIdOf(given)).toEqual({ id: given, keyShaped: false });
  });

  it('reads a 16 KiB worst case in under 5 ms', () => {
    expect(slowOnes((input) => requestIdOf(input))).toEqual([]);
  });
});

describe('Expect', () => {
  it('meets 100-continue only', () => {
    expect(meetsExpectation('100-continue')).toBe(true);
    expect(meetsExpectation('100-Continue, x')).toBe(true);
    expect(meetsExpectation('200-ok')).toBe(false);
    expect(meetsExpectation('x100-continue')).toBe(false);
  });

  it('reads a 16 KiB worst case in under 5 ms', () => {
    expect(slowOnes((input) => meetsExpectation(input))).toEqual([]);
    expect(slowOnes((input) => meetsExpectation(input.replaceAll('a', '100-continu')))).toEqual([]);
  });
});
