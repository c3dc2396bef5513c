import { describe, expect, it } from 'vitest';
import { etagOf, ifMatchChangeIds, maxPreferLength, readIdempotencyKey, readPrefer } from '../../src/http/conveniences.js';
import { slowOnes } from '../support/worst-case.js';

// The header grammar of docs/interfaces.md §11: RFC 7240 Prefer, RFC 9110 If-Match, Idempotency-Key.

describe('Prefer', () => {
  it.each([
    ['respond-async', true, undefined],
    ['respond-async, wait=5', true, 5],
    ['Respond-Async; x=1 , WAIT = 7', true, 7],
    ['wait=3, respond-async, wait=10', true, 3],
    ['respond-async, wait=abc', true, undefined],
    ['respond-async, wait=-1', true, undefined],
    ['respond-async, wait=1.5', true, undefined],
    ['respond-async, wait=', true, undefined],
    ['respond-async, wait=0', true, 0],
    ['return=minimal, wait=4', false, 4],
    ['handling="a,b", respond-async', true, undefined],
    ['', false, undefined],
  ])('%j', (header, respondAsync, waitSeconds) => {
    expect(readPrefer(header)).toEqual({ respondAsync, waitSeconds });
  });

  it('reads two header lines as one list', () => {
    expect(readPrefer(['respond-async', 'wait=2'])).toEqual(readPrefer('respond-async, wait=2'));
    expect(readPrefer(undefined)).toEqual({ respondAsync: false, waitSeconds: undefined });
  });

  it.each([
    ['respond-async;foo="a,b;c", wait=6', true, 6],
    ['wait="8", respond-async', true, 8],
    ['wait = "\\9"', false, 9],
    ['wait=5 x, respond-async', true, undefined],
    ['wait=5"x", respond-async', true, undefined],
    ['respond async, wait=2', false, 2],
    ['=1, respond-async', true, undefined],
    ['respond-async, wait="5', true, undefined],
    ['handling="lenient, respond-async', false, undefined],
    [',, respond-async ,, wait=1 ,', true, 1],
    ['\trespond-async\t;\tx\t,\twait\t=\t3', true, 3],
  ])('%j (quoted strings, parameters, malformed elements)', (header, respondAsync, waitSeconds) => {
    expect(readPrefer(header)).toEqual({ respondAsync, waitSeconds });
  });

  it(`reads a value over ${maxPreferLength} characters as no preference, never an error`, () => {
    const padding = `x=${'a'.repeat(maxPreferLength)}`;
    expect(readPrefer(`respond-async, wait=1, ${padding}`)).toEqual({ respondAsync: false, waitSeconds: undefined });
    expect(readPrefer(['respond-async', padding])).toEqual({ respondAsync: false, waitSeconds: undefined });
    const longest = `respond-async, wait=1, x="${'a'.repeat(maxPreferLength - 27)}"`;
    expect(longest).toHaveLength(maxPreferLength);
    expect(readPrefer(longest)).toEqual({ respondAsync: true, waitSeconds: 1 });
  });

  it('reads a 16 KiB worst case in under 5 ms, under the cap and over it (linear, no backtracking)', () => {
    expect(slowOnes((input) => readPrefer(input))).toEqual([]);
    // Under the cap, each worst case as long as the cap allows.
    expect(slowOnes((input) => readPrefer(input.slice(0, maxPreferLength)))).toEqual([]);
  });
});

describe('If-Match', () => {
  it('is unconditional when absent or *', () => {
    expect(ifMatchChangeIds(undefined)).toBeUndefined();
    expect(ifMatchChangeIds(' * ')).toBeUndefined();
  });

  it('names the change ids of its strong tags only', () => {
    expect(ifMatchChangeIds(etagOf('42'))).toEqual(['42']);
    expect(etagOf('42')).toBe('"v42"');
    expect(ifMatchChangeIds('"v0", W/"v7", "v9"')).toEqual(['0', '9']);
    expect(ifMatchChangeIds('v5')).toEqual([]);
    expect(ifMatchChangeIds('"v05", "x", "v99999999999999999999"')).toEqual([]);
    // The table-wide ids that earlier releases sent as tags never match a per-agent number.
    expect(ifMatchChangeIds('"c1", "c42"')).toEqual([]);
  });

  it('reads a 16 KiB worst case in under 5 ms', () => {
    expect(slowOnes((input) => ifMatchChangeIds(input), undefined)).toEqual([]);
    expect(slowOnes((input) => ifMatchChangeIds(input.replaceAll('a', 'c1')))).toEqual([]);
  });
});

describe('Idempotency-Key', () => {
  const raw = (...values: string[]) => values.flatMap((value) => ['Idempotency-Key', value]);

  it('takes 1 to 255 printable ASCII characters, trimmed', () => {
    expect(readIdempotencyKey([])).toBeUndefined();
    expect(readIdempotencyKey(raw('  abc def  '))).toBe('abc def');
    expect(readIdempotencyKey(raw('~'.repeat(255)))).toBe('~'.repeat(255));
  });

  it('refuses an empty, long, non-ASCII or repeated key', () => {
    for (const headers of [raw(''), raw('x'.repeat(256)), raw('clé'), raw('a\tb'), raw('a', 'b')]) {
      expect(readIdempotencyKey(headers)).toBe('malformed');
    }
  });
});
