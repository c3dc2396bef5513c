import { describe, expect, it } from 'vitest';
import { etagOf, ifMatchChangeIds, readIdempotencyKey, readPrefer } from '../../src/http/conveniences.js';

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
