import { randomInt } from 'node:crypto';
import { crc32 } from 'node:zlib';

/**
 * The format of the keys `npm run keys -- issue` makes (docs/interfaces.md §12), chosen so that a
 * secret scanner finds a leaked one with almost no false positives:
 *
 *   pas_ + 32 random Base62 characters (190 bits) + 6 Base62 characters of the CRC-32 of those 32
 *
 * `_` is not a Base62 or Base64 character, so the prefix never occurs inside another token and a
 * double-click selects the whole key. The checksum adds no secrecy; it lets a tool tell a real key
 * from a random string of the same shape without asking anyone.
 */
const issuedKeyPrefix = 'pas_';
const base62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const randomLength = 32;
const checksumLength = 6;
/** The shape only, as the scanner rules (.gitleaks.toml, .secretlintrc.json) match it. */
const shapeSource = `${issuedKeyPrefix}[0-9A-Za-z]{${randomLength + checksumLength}}`;
const issuedKeyShape = new RegExp(`^${shapeSource}$`);

function checksumOf(random: string): string {
  let value = crc32(random);
  let text = '';
  for (let i = 0; i < checksumLength; i++) {
    text = base62[value % 62] + text;
    value = Math.floor(value / 62);
  }
  return text;
}

/** A new key from the CSPRNG; each character drawn uniformly (randomInt, not a biased byte % 62). */
export function issueKey(): string {
  let random = '';
  for (let i = 0; i < randomLength; i++) random += base62[randomInt(62)];
  return `${issuedKeyPrefix}${random}${checksumOf(random)}`;
}

/** Every string in a text that has the shape of an issued key, checksum right or wrong. */
export function keyShapedStrings(text: string): string[] {
  return [...text.matchAll(new RegExp(`${shapeSource}\\b`, 'g'))].map((match) => match[0]);
}

/** Whether a string is an issued key: the prefix, the length, the alphabet and the checksum. */
export function isIssuedKey(candidate: string): boolean {
  if (!issuedKeyShape.test(candidate)) return false;
  const random = candidate.slice(issuedKeyPrefix.length, issuedKeyPrefix.length + randomLength);
  return candidate.endsWith(checksumOf(random));
}
