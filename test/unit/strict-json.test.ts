import { describe, expect, it } from 'vitest';
import { charsetOf, hasDuplicateMember } from '../../src/http/strict-json.js';
import { slowOnes } from '../support/worst-case.js';

describe('hasDuplicateMember: a member name twice in one object', () => {
  it.each([
    ['{"agentId":"a","agentId":"b"}'],
    ['{"agentId":"a","enabled":true,"agentId":"a"}'],
    ['{"a":{"x":1,"x":2}}'],
    ['[{"x":1},{"y":1,"y":2}]'],
    ['{"a":"\\"","a":1}'],
    ['{"agentId":1,"\\u0061gentId":2}'],
    [' { "a" : 1 , "a" : 2 } '],
  ])('finds it in %s', (text) => {
    JSON.parse(text);
    expect(hasDuplicateMember(text)).toBe(true);
  });

  it.each([
    ['{"agentId":"agentId","enabled":false}'],
    ['{"a":{"x":1},"b":{"x":1}}'],
    ['[{"x":1},{"x":2}]'],
    ['{"a":["a","a"],"b":"a"}'],
    ['{"a\\\\":1,"a":2}'],
    ['{"a":"{\\"a\\":1}","b":"}"}'],
    ['"agentId"'],
    ['{}'],
  ])('finds none in %s', (text) => {
    JSON.parse(text);
    expect(hasDuplicateMember(text)).toBe(false);
  });
});

describe('charsetOf', () => {
  it.each([
    ['application/json', undefined],
    ['application/json; charset=utf-8', 'utf-8'],
    ['application/json;CHARSET="UTF-8"', 'utf-8'],
    ['application/json; charset=utf-16', 'utf-16'],
    ['application/json; foo=bar; charset=latin1', 'latin1'],
  ])('%s has charset %s', (contentType, charset) => {
    expect(charsetOf(contentType)).toBe(charset);
  });

  it('reads a 16 KiB worst case in under 5 ms', () => {
    expect(slowOnes((input) => charsetOf(`application/json; charset=${input}`))).toEqual([]);
    expect(slowOnes((input) => charsetOf(`application/json; charset="${input}`))).toEqual([]);
  });
});
