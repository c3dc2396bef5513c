// The partner API's dated versions (docs/interfaces.md §15): the one table of versions and of the
// breaking changes each makes, how a request's version is resolved (after its key is known, so
// that a key's pinned version counts), and the deprecation a version announces in its answers.
// It sits on the ground floor beside config.ts because the key set (an entry may pin a version)
// and the configuration (API_VERSION_DEPRECATIONS) check against the table; it is plain data and
// functions. What a version changes is applied only in src/http: an answer that differs between
// versions is a row of the answer catalogue (http/answers.ts), which asks `versionMakes`, and
// nothing in src/agents or src/stores knows about versions.
import { z } from 'zod';

/**
 * A breaking change, named by what it changes. An additive change (a new field, a new route) comes
 * to every version and is never one of these.
 */
export type VersionChange =
  /** A disable that is recorded but not finished by its answer answers 202 with its status, not 500 with counts. */
  'incompleteDisableAccepted';

/** Every version, oldest first, with the breaking changes it makes; a version keeps every change of the versions before it. */
export const apiVersionTable = [
  {
    version: '2026-11-21',
    changes: [],
    summary: 'The first version: the behaviour the service had before versions existed.',
  },
  {
    version: '2026-12-01',
    changes: ['incompleteDisableAccepted'],
    summary:
      'A disable that is recorded but whose pausing is not finished by the answer (a system holding campaign state failed, or the work takes longer than one request may) answers 202 with the status and Location, instead of 500 with pausedCampaignCount and remainingCampaignCount. A 500 then means that nothing was recorded.',
  },
] as const satisfies readonly { version: string; changes: readonly VersionChange[]; summary: string }[];

export type ApiVersion = (typeof apiVersionTable)[number]['version'];

/** The version of a request that names none and whose key pins none: the behaviour before versions existed. */
export const defaultApiVersion: ApiVersion = '2026-11-21';
/** The newest version: what the OpenAPI document describes when asked for no version. */
export const newestApiVersion: ApiVersion = apiVersionTable.at(-1)!.version;
export const apiVersionNames: readonly ApiVersion[] = apiVersionTable.map((row) => row.version);

/** The request and response header naming the version. */
export const apiVersionHeader = 'partner-api-version';

export function isApiVersion(value: unknown): value is ApiVersion {
  return typeof value === 'string' && (apiVersionNames as readonly string[]).includes(value);
}

/** Whether `version` makes `change` (its own or an earlier version's). */
export function versionMakes(version: ApiVersion, change: VersionChange): boolean {
  for (const row of apiVersionTable) {
    if ((row.changes as readonly VersionChange[]).includes(change)) return true;
    if (row.version === version) return false;
  }
  return false;
}

/** A version's announced end (API_VERSION_DEPRECATIONS), times in Unix milliseconds. */
export interface Deprecation {
  deprecatedAt: number;
  /** From then on the version is refused (400); none: no date announced yet. */
  sunsetAt?: number;
  /** Where partners read about the deprecation and how to move on. */
  link: string;
}

export type Deprecations = ReadonlyMap<ApiVersion, Deprecation>;

export class InvalidDeprecationsError extends Error {
  override readonly name = 'InvalidDeprecationsError';
}

const rfc3339 = z.iso.datetime({ offset: true });
const deprecationEntry = z.strictObject({
  deprecatedAt: rfc3339,
  sunsetAt: rfc3339.optional(),
  link: z.url({ protocol: /^https?$/ }),
});

/**
 * API_VERSION_DEPRECATIONS: `{"<version>": {"deprecatedAt", "sunsetAt"?, "link"}}`, checked whole
 * at start. Refused: a version the table does not have, the newest version (partners would have
 * nothing to move to), a sunset before its deprecation (RFC 9745 §4.2), a member the format does
 * not have, a link that is not an absolute http(s) URL or that carries credentials.
 */
export function parseDeprecations(text: string | undefined): Deprecations {
  const deprecations = new Map<ApiVersion, Deprecation>();
  if (text === undefined || text.trim() === '') return deprecations;
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch {
    throw new InvalidDeprecationsError('is not valid JSON');
  }
  if (typeof document !== 'object' || document === null || Array.isArray(document)) {
    throw new InvalidDeprecationsError(
      'must be a JSON object of versions, such as {"2026-11-21": {"deprecatedAt": …, "sunsetAt": …, "link": …}}',
    );
  }
  for (const [version, entry] of Object.entries(document)) {
    if (!isApiVersion(version)) {
      throw new InvalidDeprecationsError(`names "${version}", which is not a version; the versions are ${apiVersionNames.join(', ')}`);
    }
    if (version === newestApiVersion)
      throw new InvalidDeprecationsError(`deprecates ${version}, the newest version: partners would have none to move to`);
    const parsed = deprecationEntry.safeParse(entry);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      const field = issue.path.join('.') || 'the entry';
      throw new InvalidDeprecationsError(
        `${version}: ${field} ${issue.code === 'unrecognized_keys' ? `has an unknown member (${issue.keys.join(', ')})` : 'is invalid'}; an entry is {"deprecatedAt": "<RFC 3339>", "sunsetAt"?: "<RFC 3339>", "link": "<http(s) URL>"}`,
      );
    }
    const link = new URL(parsed.data.link);
    // Sent in a header of every answer of a deprecated version: a user name or password in it
    // would be handed to every partner.
    if (link.username || link.password) throw new InvalidDeprecationsError(`${version}: link must not carry credentials (user:password@)`);
    const deprecatedAt = Date.parse(parsed.data.deprecatedAt);
    const sunsetAt = parsed.data.sunsetAt === undefined ? undefined : Date.parse(parsed.data.sunsetAt);
    if (sunsetAt !== undefined && sunsetAt < deprecatedAt) {
      throw new InvalidDeprecationsError(
        `${version}: sunsetAt (${parsed.data.sunsetAt}) is before deprecatedAt (${parsed.data.deprecatedAt})`,
      );
    }
    deprecations.set(version, { deprecatedAt, ...(sunsetAt === undefined ? {} : { sunsetAt }), link: link.href });
  }
  return deprecations;
}

/**
 * The headers of a deprecated version's answers: `Deprecation` as a structured-field Date (RFC 9745;
 * the date may lie ahead, announcing it), `Sunset` as an HTTP-date (RFC 8594) and the documentation
 * link with relation `deprecation`.
 */
export function deprecationHeaders(deprecation: Deprecation): Record<string, string> {
  return {
    deprecation: `@${Math.floor(deprecation.deprecatedAt / 1000)}`,
    ...(deprecation.sunsetAt === undefined ? {} : { sunset: new Date(deprecation.sunsetAt).toUTCString() }),
    link: `<${deprecation.link}>; rel="deprecation"`,
  };
}

/** The versions a request may use at `now`: the table less those past their sunset. */
export function supportedApiVersions(deprecations: Deprecations, now = Date.now()): ApiVersion[] {
  return apiVersionNames.filter((version) => {
    const sunsetAt = deprecations.get(version)?.sunsetAt;
    return sunsetAt === undefined || now < sunsetAt;
  });
}
