import { parseItem } from 'structured-headers';
import { describe, expect, it } from 'vitest';
import {
  apiVersionNames,
  defaultApiVersion,
  deprecationHeaders,
  newestApiVersion,
  parseDeprecations,
  supportedApiVersions,
  versionMakes,
} from '../../src/api-versions.js';
import { ConfigError, loadConfig } from '../../src/config.js';

// docs/interfaces.md §15: the table of versions, API_VERSION_DEPRECATIONS and the headers it makes.

const minimal = {
  DATABASE_URL: 'postgres://u:secret@db:5432/app',
  REDIS_URL: 'redis://cache:6379',
  SPEND_MANAGEMENT_URL: 'http://spend:8080',
  PARTNER_KEYS_FILE: '/etc/partner-keys/partner-keys.json',
};

const deprecating = (entry: Record<string, unknown>, version = '2026-11-21') => JSON.stringify({ [version]: entry });

describe('the table of versions', () => {
  it('has 2026-11-21 as the default and 2026-12-01 as the newest, oldest first', () => {
    expect(apiVersionNames).toEqual(['2026-11-21', '2026-12-01']);
    expect(defaultApiVersion).toBe('2026-11-21');
    expect(newestApiVersion).toBe('2026-12-01');
  });

  it('gives a version its own changes and those of every earlier version, never a later one', () => {
    expect(versionMakes('2026-11-21', 'incompleteDisableAccepted')).toBe(false);
    expect(versionMakes('2026-12-01', 'incompleteDisableAccepted')).toBe(true);
  });
});

describe('API_VERSION_DEPRECATIONS', () => {
  it('is empty when unset or blank', () => {
    expect(parseDeprecations(undefined).size).toBe(0);
    expect(parseDeprecations('  ').size).toBe(0);
    expect(loadConfig(minimal).apiVersionDeprecations.size).toBe(0);
  });

  it('reads a deprecation with its sunset and link', () => {
    const parsed = parseDeprecations(
      deprecating({ deprecatedAt: '2027-01-01T00:00:00Z', sunsetAt: '2028-01-01T00:00:00+01:00', link: 'https://example.com/versions' }),
    );
    expect(parsed.get('2026-11-21')).toEqual({
      deprecatedAt: Date.parse('2027-01-01T00:00:00Z'),
      sunsetAt: Date.parse('2027-12-31T23:00:00Z'),
      link: 'https://example.com/versions',
    });
  });

  const refused: Array<[string, string, RegExp]> = [
    ['JSON that does not parse', '{', /API_VERSION_DEPRECATIONS is not valid JSON/],
    ['an array', '[]', /must be a JSON object of versions/],
    [
      'a version the table does not have',
      deprecating({ deprecatedAt: '2027-01-01T00:00:00Z', link: 'https://example.com/' }, '2026-11-20'),
      /names "2026-11-20", which is not a version; the versions are 2026-11-21, 2026-12-01/,
    ],
    [
      'the newest version',
      deprecating({ deprecatedAt: '2027-01-01T00:00:00Z', link: 'https://example.com/' }, '2026-12-01'),
      /deprecates 2026-12-01, the newest version/,
    ],
    [
      'a sunset before the deprecation',
      deprecating({ deprecatedAt: '2027-06-01T00:00:00Z', sunsetAt: '2027-05-31T23:59:59Z', link: 'https://example.com/' }),
      /2026-11-21: sunsetAt \(2027-05-31T23:59:59Z\) is before deprecatedAt \(2027-06-01T00:00:00Z\)/,
    ],
    [
      'a date without an offset',
      deprecating({ deprecatedAt: '2027-01-01T00:00:00', link: 'https://example.com/' }),
      /deprecatedAt is invalid/,
    ],
    ['no link', deprecating({ deprecatedAt: '2027-01-01T00:00:00Z' }), /link is invalid/],
    [
      'a link with credentials',
      deprecating({ deprecatedAt: '2027-01-01T00:00:00Z', link: 'https://docs:hunter2@example.com/versions' }),
      /link must not carry credentials/,
    ],
    ['a link that is not http(s)', deprecating({ deprecatedAt: '2027-01-01T00:00:00Z', link: 'ftp://example.com/' }), /link is invalid/],
    [
      'a member the format does not have',
      deprecating({ deprecatedAt: '2027-01-01T00:00:00Z', link: 'https://example.com/', removedAt: '2028-01-01T00:00:00Z' }),
      /unknown member \(removedAt\)/,
    ],
  ];
  for (const [what, value, message] of refused) {
    it(`refuses to start with ${what}, naming the variable`, () => {
      const load = () => loadConfig({ ...minimal, API_VERSION_DEPRECATIONS: value });
      expect(load).toThrow(ConfigError);
      expect(load).toThrow(/^API_VERSION_DEPRECATIONS /);
      expect(load).toThrow(message);
    });
  }

  it('accepts a sunset equal to the deprecation, and no sunset at all', () => {
    expect(
      parseDeprecations(deprecating({ deprecatedAt: '2027-01-01T00:00:00Z', sunsetAt: '2027-01-01T00:00:00Z', link: 'https://e.x/' })).size,
    ).toBe(1);
    expect(
      parseDeprecations(deprecating({ deprecatedAt: '2027-01-01T00:00:00Z', link: 'https://e.x/' })).get('2026-11-21')?.sunsetAt,
    ).toBeUndefined();
  });
});

describe('the deprecation headers', () => {
  const deprecation = {
    deprecatedAt: Date.parse('2027-01-01T12:30:45.900Z'),
    sunsetAt: Date.parse('2028-01-01T00:00:00Z'),
    link: 'https://example.com/v',
  };

  it('say the deprecation as a structured-field Date (RFC 9745), the sunset as an HTTP-date (RFC 8594), and link the documentation', () => {
    const headers = deprecationHeaders(deprecation);
    const [date] = parseItem(headers.deprecation!);
    expect(date).toEqual(new Date('2027-01-01T12:30:45Z'));
    expect(headers.sunset).toBe('Sat, 01 Jan 2028 00:00:00 GMT');
    expect(headers.link).toBe('<https://example.com/v>; rel="deprecation"');
  });

  it('leave Sunset out while no sunset is announced', () => {
    expect(Object.keys(deprecationHeaders({ deprecatedAt: deprecation.deprecatedAt, link: deprecation.link })).sort()).toEqual([
      'deprecation',
      'link',
    ]);
  });
});

describe('the supported versions', () => {
  it('are the table less the versions past their sunset', () => {
    const deprecations = parseDeprecations(
      deprecating({ deprecatedAt: '2027-01-01T00:00:00Z', sunsetAt: '2028-01-01T00:00:00Z', link: 'https://example.com/' }),
    );
    expect(supportedApiVersions(deprecations, Date.parse('2027-12-31T23:59:59Z'))).toEqual(['2026-11-21', '2026-12-01']);
    expect(supportedApiVersions(deprecations, Date.parse('2028-01-01T00:00:00Z'))).toEqual(['2026-12-01']);
  });
});
