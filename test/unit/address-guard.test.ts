import { describe, expect, it } from 'vitest';
import { parseCidr } from '../../src/config.js';
import { allowedRanges, isPublicAddress } from '../../src/events/address-guard.js';
import { nextAttemptInMs, retryAfterMs } from '../../src/events/webhook-sender.js';

describe('the address classifier refuses every address that is not public unicast (no socket, no DNS)', () => {
  it.each([
    ['169.254.169.254', 'cloud metadata (IPv4 link-local)'],
    ['fd00:ec2::254', 'AWS metadata over IPv6 (unique local)'],
    ['10.0.0.1', 'private 10/8'],
    ['172.16.5.4', 'private 172.16/12'],
    ['192.168.1.1', 'private 192.168/16'],
    ['100.64.0.1', 'shared address space'],
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback, end of the range'],
    ['0.0.0.0', 'this host'],
    ['224.0.0.1', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['198.18.0.1', 'benchmarking'],
    ['192.0.2.1', 'documentation'],
    ['::', 'unspecified'],
    ['::1', 'IPv6 loopback'],
    ['fc00::1', 'unique local'],
    ['fe80::1', 'IPv6 link-local'],
    ['ff02::1', 'IPv6 multicast'],
    ['::ffff:127.0.0.1', 'IPv4-mapped loopback'],
    ['::ffff:8.8.8.8', 'IPv4-mapped, even of a public address'],
    ['64:ff9b::7f00:1', 'NAT64 of 127.0.0.1'],
    ['64:ff9b:1::a00:1', 'local-use NAT64'],
    ['2002:7f00:1::1', '6to4 of 127.0.0.1'],
    ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'Teredo'],
    ['2001:db8::1', 'IPv6 documentation'],
    ['not-an-address', 'a name (names are resolved first)'],
  ])('%s (%s) is refused', (address) => {
    expect(isPublicAddress(address)).toBe(false);
  });

  it.each([['8.8.8.8'], ['1.1.1.1'], ['93.184.216.34'], ['2606:4700:4700::1111'], ['2a00:1450:4001:82a::200e']])(
    '%s (public) is allowed',
    (address) => {
      expect(isPublicAddress(address)).toBe(true);
    },
  );

  it('lets through the ranges an operator allows (WEBHOOK_ALLOWED_CIDRS), and only those', () => {
    const allowed = allowedRanges(['127.0.0.1/32', '::1/128']);
    expect(isPublicAddress('127.0.0.1', allowed)).toBe(true);
    expect(isPublicAddress('::1', allowed)).toBe(true);
    expect(isPublicAddress('127.0.0.2', allowed)).toBe(false);
    expect(isPublicAddress('169.254.169.254', allowed)).toBe(false);
  });

  it('reads ranges as address/prefix and refuses anything else', () => {
    expect(parseCidr('127.0.0.0/8')).toEqual(['127.0.0.0', 8]);
    expect(parseCidr('fd00::/8')).toEqual(['fd00::', 8]);
    for (const bad of ['127.0.0.0', '127.0.0.0/33', 'localhost/8', '::1/129', '']) expect(() => parseCidr(bad)).toThrow();
  });
});

describe('the retry schedule', () => {
  const schedule = [5_000, 300_000, 1_800_000];

  it('gives the gap of the attempts made so far, within ±10 %', () => {
    expect(nextAttemptInMs(schedule, 1, undefined, () => 0)).toBe(4_500);
    expect(nextAttemptInMs(schedule, 1, undefined, () => 1)).toBe(5_500);
    expect(nextAttemptInMs(schedule, 2, undefined, () => 0.5)).toBe(300_000);
  });

  it('ends after the last gap', () => {
    expect(nextAttemptInMs(schedule, 4, undefined, () => 0.5)).toBeUndefined();
  });

  it('waits longer when Retry-After asks for it, never shorter', () => {
    expect(nextAttemptInMs(schedule, 1, 60_000, () => 0.5)).toBe(60_000);
    expect(nextAttemptInMs(schedule, 2, 1_000, () => 0.5)).toBe(300_000);
  });

  it('reads Retry-After as seconds or as an HTTP date, capped at a day', () => {
    expect(retryAfterMs('120')).toBe(120_000);
    expect(retryAfterMs(new Date(Date.UTC(2030, 0, 1, 0, 1)).toUTCString(), Date.UTC(2030, 0, 1))).toBe(60_000);
    expect(retryAfterMs('9999999')).toBe(24 * 3600 * 1000);
    expect(retryAfterMs('soon')).toBeUndefined();
    expect(retryAfterMs(undefined)).toBeUndefined();
  });
});
