/**
 * Writes docs/openapi.json (the newest API version) and docs/openapi-<version>.json (each API
 * version), the partner API's OpenAPI documents, from the code: the real app
 * (buildApp, every route and schema as in production) with inert dependencies, so no database,
 * key-value store or key file is needed. Run it with `npm run openapi` after changing a route;
 * test/openapi/document.test.ts fails while a committed file differs from what this generates.
 * No version is deprecated in them: deprecation is configuration (API_VERSION_DEPRECATIONS), and the
 * served documents say what a running service's configuration deprecates.
 */
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type ApiVersion, apiVersionNames, newestApiVersion } from '../src/api-versions.js';
import { PartnerKeyStore } from '../src/auth/partner-keys.js';
import { loadConfig } from '../src/config.js';
import { buildApp } from '../src/http/app.js';
import { createLogger } from '../src/observability/logger.js';
import { createMetrics } from '../src/observability/metrics.js';

/** Only what loadConfig requires; the document depends on none of it. */
const documentationEnvironment = {
  DATABASE_URL: 'postgres://unused/none',
  REDIS_URL: 'redis://unused',
  SPEND_MANAGEMENT_URL: 'http://unused',
  PARTNER_KEYS_FILE: '/dev/null',
};

export const openApiDocumentPath = fileURLToPath(new URL('../docs/openapi.json', import.meta.url));
/** The committed document of one API version. */
export const versionDocumentPath = (version: ApiVersion) => fileURLToPath(new URL(`../docs/openapi-${version}.json`, import.meta.url));

/** The app as production builds it, with dependencies that are never used to document it. */
export async function buildInertApp() {
  return buildApp({
    logger: createLogger('silent'),
    metrics: createMetrics({ collectDefaults: false }),
    keyStore: new PartnerKeyStore(),
    isReady: async () => false,
    agentStatus: {
      setAgentStatus: async () => {
        throw new Error('never called while generating the OpenAPI document');
      },
      readAgentStatus: async () => {
        throw new Error('never called while generating the OpenAPI document');
      },
      readStatusChanges: async () => {
        throw new Error('never called while generating the OpenAPI document');
      },
    },
    idempotencyKeys: undefined as never,
    webhooks: { endpoints: undefined as never, refusalOfUrl: undefined as never },
    bulk: { changes: undefined as never, batches: undefined as never },
    eventFeed: { feed: undefined as never, retentionDays: 30, maxStreamsPerNetwork: 5 },
    limits: { ...loadConfig(documentationEnvironment).limits, rateLimitMax: 0 },
    rateLimitStore: { redis: undefined, keyPrefix: '' },
  });
}

/** The OpenAPI document of an API version (the newest by default) as served, as a plain JSON value. */
export async function generateOpenApiDocument(version: ApiVersion = newestApiVersion): Promise<Record<string, unknown>> {
  const app = await buildInertApp();
  try {
    await app.ready();
    const response = await app.inject({ method: 'GET', url: `/partner/openapi.json?version=${version}` });
    if (response.statusCode !== 200) throw new Error(`the document of ${version} answered ${response.statusCode}`);
    return JSON.parse(response.body) as Record<string, unknown>;
  } finally {
    await app.close();
  }
}

/** The committed form: pretty-printed with two spaces and a trailing newline. */
export function renderOpenApiDocument(document: unknown): string {
  return `${JSON.stringify(document, null, 2)}\n`;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  writeFileSync(openApiDocumentPath, renderOpenApiDocument(await generateOpenApiDocument()));
  console.log(`wrote ${openApiDocumentPath}`);
  for (const version of apiVersionNames) {
    writeFileSync(versionDocumentPath(version), renderOpenApiDocument(await generateOpenApiDocument(version)));
    console.log(`wrote ${versionDocumentPath(version)}`);
  }
}
