// The OpenAPI document of each API version (docs/interfaces.md §15): the document the route
// schemas generate, with the version's own header, the versions a partner may name, the
// deprecation of a deprecated version and the answers the version changes. Served at
// GET /partner/openapi.json?version=YYYY-MM-DD (src/http/routes/openapi.ts); committed as
// docs/openapi.json (the newest) and docs/openapi-<version>.json (npm run openapi).
import {
  type ApiVersion,
  apiVersionTable,
  type Deprecation,
  type Deprecations,
  defaultApiVersion,
  newestApiVersion,
  versionMakes,
} from '../api-versions.js';
import { partnerPath, partnerRoutes } from './paths.js';
import { problem } from './problems.js';

// biome-ignore lint/suspicious/noExplicitAny: a generated JSON document, walked by name
type Json = any;

const operationMethods = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;

/** The example of the 400 for an unsupported version, as the service sends it. */
const unsupportedVersion = Object.assign(
  problem(
    'unsupportedApiVersion',
    `Partner-Api-Version must name one of the supported versions exactly (YYYY-MM-DD): ${apiVersionTable.map((row) => row.version).join(', ')}. Nothing was changed.`,
    '5b0e8c1d-2f47-4a36-9e1b-7d3c6a9f0e42',
  ),
  { supportedVersions: apiVersionTable.map((row) => row.version) },
);

const day = (epochMs: number) => new Date(epochMs).toISOString().slice(0, 10);

function standing(version: ApiVersion, deprecations: Deprecations): string {
  const deprecation = deprecations.get(version);
  if (!deprecation) return version === newestApiVersion ? 'current (newest)' : 'supported';
  return `deprecated from ${day(deprecation.deprecatedAt)}${deprecation.sunsetAt === undefined ? '' : `, sunset ${day(deprecation.sunsetAt)}`}`;
}

/** The info description's section on versions: the table, and what this document's version is. */
function versionsSection(version: ApiVersion, deprecations: Deprecations): string {
  const rows = apiVersionTable.map((row) => `| \`${row.version}\` | ${standing(row.version, deprecations)} | ${row.summary} |`);
  return `

## API versions

This document describes version \`${version}\`${deprecations.has(version) ? ' (**deprecated**)' : ''}. Name the version in the \`Partner-Api-Version\` request header (\`YYYY-MM-DD\`, matched exactly); without it, the version your key is pinned to applies, else \`${defaultApiVersion}\`. Every answer after authentication carries \`Partner-Api-Version\` with the version used. An unknown version, or one past its sunset, is a 400 listing the supported versions (\`supportedVersions\`). A deprecated version still works and says so in \`Deprecation\`, \`Sunset\` and \`Link\` (\`rel="deprecation"\`). Additive changes (new fields, new routes) come to every version. The document of another version: \`GET ${partnerPath(partnerRoutes.openApi)}?version=YYYY-MM-DD\`.

| version | status | changes |
| --- | --- | --- |
${rows.join('\n')}`;
}

function versionParameter(deprecations: Deprecations): Json {
  const deprecated = [...deprecations.keys()];
  return {
    name: 'Partner-Api-Version',
    in: 'header',
    required: false,
    description: `The API version to answer in (\`YYYY-MM-DD\`, matched exactly). Without it: your key's pinned version, else \`${defaultApiVersion}\`.${deprecated.length > 0 ? ` Deprecated: ${deprecated.map((v) => `\`${v}\``).join(', ')}.` : ''}`,
    schema: { type: 'string', enum: apiVersionTable.map((row) => row.version) },
  };
}

function deprecationResponseHeaders(deprecation: Deprecation): Json {
  return {
    deprecation: {
      description: `RFC 9745: when this version was or will be deprecated, a structured-field date (\`@${Math.floor(deprecation.deprecatedAt / 1000)}\`).`,
      schema: { type: 'string' },
    },
    ...(deprecation.sunsetAt === undefined
      ? {}
      : {
          sunset: {
            description: `RFC 8594: from when this version is no longer served (\`${new Date(deprecation.sunsetAt).toUTCString()}\`).`,
            schema: { type: 'string' },
          },
        }),
    link: { description: 'Where to read about the deprecation: `<URL>; rel="deprecation"`.', schema: { type: 'string' } },
  };
}

/** What the version changes in the disable's answers (the table's changes, as the document tells them). */
function describeChanges(version: ApiVersion, operation: Json): void {
  if (operation.operationId !== 'setAgentStatus' || !versionMakes(version, 'incompleteDisableAccepted')) return;
  const responses = operation.responses;
  if (responses['202']) {
    responses['202'].description =
      'The disable is recorded (its pending disable and change row committed) and its campaigns are still being paused when it is answered: because it was sent with `Prefer: respond-async`, or because a system holding campaign state failed or did not confirm every pause, or the work takes longer than one request may. The service finishes by itself. `Location` is the status endpoint that shows the progress; the body is its status at that moment. (`Preference-Applied` is sent only when the preference was.)';
  }
  if (responses['500']) {
    responses['500'].description =
      'Nothing was recorded (the database did not answer, or an unexpected error). Repeating the request is always safe. Problem types: `urn:partner-agent-status:problem:dependency-failure` (Dependency failure), `urn:partner-agent-status:problem:internal` (Internal error).';
  }
}

/**
 * The document of `version`, built from the generated one (left as it is). Operations that take an
 * API key get the `Partner-Api-Version` parameter and response header; in a deprecated version's
 * document they are marked deprecated and their answers list the deprecation headers.
 */
export function documentOfVersion(generated: Json, version: ApiVersion, deprecations: Deprecations): Json {
  const document = structuredClone(generated);
  document.info.version = version;
  document.info.description += versionsSection(version, deprecations);
  document.components.parameters.PartnerApiVersion = versionParameter(deprecations);
  document.components.headers.PartnerApiVersion = {
    description:
      'The API version this answer is in. Sent on every answer after authentication (not on a 401, nor on the 400 for an unsupported version).',
    required: false,
    schema: { type: 'string', enum: apiVersionTable.map((row) => row.version) },
  };
  const deprecation = deprecations.get(version);
  for (const pathItem of Object.values<Json>(document.paths)) {
    for (const method of operationMethods) {
      const operation = pathItem[method];
      // Operations without a key (the document itself) have no version.
      if (!operation || (Array.isArray(operation.security) && operation.security.length === 0)) continue;
      operation.parameters = [...(operation.parameters ?? []), { $ref: '#/components/parameters/PartnerApiVersion' }];
      if (deprecation) operation.deprecated = true;
      for (const [status, response] of Object.entries<Json>(operation.responses ?? {})) {
        if (status === '401' || '$ref' in response) continue;
        response.headers = {
          ...response.headers,
          'partner-api-version': { $ref: '#/components/headers/PartnerApiVersion' },
          ...(deprecation ? deprecationResponseHeaders(deprecation) : {}),
        };
      }
      const invalid = operation.responses?.['400'];
      if (invalid && !('$ref' in invalid)) {
        invalid.description += ` Or \`Partner-Api-Version\` (or the version your key is pinned to) is not a supported version: \`${unsupportedVersion.type}\` (${unsupportedVersion.title}), with \`supportedVersions\`; this 400 comes after the 401 and the 429, and carries no \`Partner-Api-Version\`.`;
        const examples = invalid.content?.['application/problem+json']?.examples;
        if (examples)
          examples.unsupportedApiVersion = { summary: 'Partner-Api-Version names no supported version', value: unsupportedVersion };
      }
      describeChanges(version, operation);
    }
  }
  return document;
}
