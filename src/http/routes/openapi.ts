import { createHash } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import swagger, { type FastifyDynamicSwaggerOptions } from '@fastify/swagger';
import type { FastifyInstance } from 'fastify';
import { type ApiVersion, apiVersionNames, type Deprecations, isApiVersion, newestApiVersion } from '../../api-versions.js';
import { documentOfVersion } from '../api-version-documents.js';
import { documentedPath, partnerPath, partnerPrefix, partnerRoutes } from '../paths.js';
import { problem, problemDetails, sendProblem } from '../problems.js';
import type { UnauthenticatedShedding } from '../unauthenticated-shedding.js';
import { problemResponse } from './problem-schema.js';

/** A document as sent (its bytes, and gzipped), and its ETag. */
interface SerialisedDocument {
  body: Buffer;
  gzipped: Buffer;
  etag: string;
}

/** Whether If-None-Match names `etag` (a list, weak forms and `*` included; RFC 9110 §13.1.2). */
export function etagMatches(header: string | undefined, etag: string): boolean {
  if (!header) return false;
  return header.split(',').some((tag) => {
    const trimmed = tag.trim();
    return trimmed === '*' || trimmed === etag || trimmed === `W/${etag}`;
  });
}

/** An OpenAPI Example Object. */
export interface OpenApiExample {
  summary?: string;
  description?: string;
  value: unknown;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Documentation-only additions to the route's OpenAPI operation; never read at run time. */
    openapi?: {
      /** Named examples of the request body (the body schema itself must stay plain JSON Schema). */
      requestBodyExamples?: Record<string, OpenApiExample>;
    };
  }
}

const unknownDocumentVersion = `version must name an API version exactly (YYYY-MM-DD): ${apiVersionNames.join(', ')}.`;

const requestIdDescription =
  'Identifies the request in our logs and in the `requestId` of a problem body. Send your own (1 to 128 characters of ' +
  '`A-Z a-z 0-9 . _ : @ / + = -`, a UUID say) to correlate with your logs; any other value is replaced by a generated UUID, ' +
  'and so is one with 16 or more characters in a row of `A-Z a-z 0-9 _ + / =` (it could be an API key, which is never echoed).';

function infoDescription(bodyLimitKiB: number): string {
  return `Lets a partner switch an agent of its own network on and off.

## What the calls do

- **Disable** (\`enabled: false\`) sets the agent's approval (\`agentApproved\`) to \`false\`, then pauses every active, currently unpaused campaign of the agent in every system that holds campaign state: the relational database, the spending periods of the spend-management system and the key-value store. The response says how many campaigns this call paused (\`pausedCampaignCount\`).
- **Enable** (\`enabled: true\`) sets \`agentApproved\` to \`true\` and resumes nothing: \`pausedCampaignCount\` is \`0\`.
- Campaigns paused by a disable stay paused after a later enable. They are resumed only by the agent (once approved again) or by a manager.
- While an agent is disabled and its network requires agent approval, the agent cannot create campaigns, purchase bulk leads, transfer funds, create groups, deposit or unpause campaigns.

## Authentication

Every call carries your API key in the \`x-api-key\` header; no other place (query string, \`Authorization\`) is read, and no other scheme is accepted. A missing or unknown key gets a 401 before anything else is looked at. Each key is bound to exactly one network, and the calls act on that network only: an agent of another network gets a 404 identical to the one for an agent that does not exist at all. Keep keys out of client-side apps, source control and logs.

## Retrying, and what a 500 means

Repeating a request is always safe. A disable of an agent that is already disabled, with nothing left to pause, answers 200 with \`pausedCampaignCount\` \`0\`.

A disable the service has accepted is never lost. If it cannot pause every campaign within the request (a system holding campaign state failed, or did not confirm some campaigns, or the work takes longer than one request may), the answer is a 500 with \`pausedCampaignCount\` and \`remainingCampaignCount\`: the agent is disabled, and the service goes on pausing the remaining campaigns by itself, without any further request. \`GET ${documentedPath(partnerRoutes.agentStatusRead)}\` shows the progress (\`disableInProgress\`, \`activeUnpausedCampaignCount\`). An enable answered after a disable was requested supersedes it: that disable stops and answers 409.

Do not repeat a 4xx unchanged: fix the request first (400, 401, 404, 405, 410, 412, 413, 415, 417, 422), or wait for \`Retry-After\` seconds (429, 503); none of these changed anything.

## Limits

Each network may make a limited number of requests per window, counted across all replicas; every successful answer carries the IETF draft fields \`RateLimit-Policy\` and \`RateLimit\`, and a request over the limit gets a 429 with \`Retry-After\`. A network may also disable only a few agents at once; a disable of a further agent gets a 429 at once (repeating a disable of an agent already being disabled waits for it instead). A 429 changes nothing.

## Errors

Every error is \`application/problem+json\` (RFC 9457) with \`type\` (a stable URN to match on), \`title\`, \`status\`, \`detail\` (what to fix) and \`requestId\`. Bodies are JSON in UTF-8 (\`Content-Type: application/json\`, with no charset or \`charset=utf-8\`; another charset or any \`Content-Encoding\` is a 415), with each member name at most once per object (a repeated one is a 400), and at most ${bodyLimitKiB} KiB.

## Request ids

Every response carries \`x-request-id\`: the one you sent when it is well-formed, else a generated one. Quote it when you contact support.`;
}

/**
 * Lenient on purpose: it says what the served document is, the document's own validity is tested.
 * No `properties`, so the serializer writes the document's fields in their own order.
 */
const OpenApiDocumentSchema = {
  type: 'object',
  required: ['openapi', 'info', 'paths'],
  additionalProperties: true,
  description: 'An OpenAPI 3.1 document.',
} as const;

const requestIdParameter = { $ref: '#/components/parameters/RequestId' };
const requestIdHeader = { $ref: '#/components/headers/RequestId' };
const httpMethods = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;

/** The parts of the generated document that transformObject touches. */
interface GeneratedOperation {
  parameters?: unknown[];
  responses?: Record<string, { $ref: string } | { headers?: Record<string, unknown> }>;
}
interface GeneratedDocument {
  paths?: Record<string, Partial<Record<(typeof httpMethods)[number], GeneratedOperation>> | undefined>;
  [field: string]: unknown;
}
type TransformObjectResult = ReturnType<NonNullable<FastifyDynamicSwaggerOptions['transformObject']>>;

/**
 * The OpenAPI 3.1 document, generated by @fastify/swagger from the route schemas themselves, and
 * served without a key at GET /partner/openapi.json (the ingress exposes /partner/ only). It
 * documents the partner routes only: /livez and /readyz are left out (probes of the cluster, not
 * routed by the ingress, so a partner could never call them). Things every route shares come from
 * here: the security scheme, `x-request-id` as an optional request header and as a header of every
 * response (the onRequest hook of src/http/app.ts sets it on every answer). Must be registered before
 * the routes it documents. `docs/openapi.json` is the committed copy (npm run openapi).
 */
export async function registerOpenApi(
  // biome-ignore lint/suspicious/noExplicitAny: the plugin takes any logger and type provider
  app: FastifyInstance<any, any, any, any, any>,
  deprecations: Deprecations = new Map(),
  shedding?: Pick<UnauthenticatedShedding, 'hook' | 'shed' | 'overDocumentBudget'>,
): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Partner Agent Status API',
        version: '1.0.0',
        summary: 'Enable or disable the agents of your network.',
        description: infoDescription(app.initialConfig.bodyLimit! / 1024),
      },
      servers: [{ url: '/', description: 'The host that serves this document.' }],
      tags: [
        { name: 'Agents', description: 'Switch agents of your network on and off.' },
        { name: 'Webhooks', description: 'Endpoints of your network that the service calls back with signed events.' },
        {
          name: 'Events',
          description:
            "Your network's events to catch up with (pages after a cursor) or to listen to (Server-Sent Events), without an endpoint of your own.",
        },
        { name: 'Reference', description: 'Machine-readable description of this API.' },
      ],
      components: {
        securitySchemes: {
          apiKey: {
            type: 'apiKey',
            in: 'header',
            name: 'x-api-key',
            description: 'Your partner API key, issued by the operator and bound to one network. Sent in this header only.',
          },
        },
        parameters: {
          RequestId: { name: 'x-request-id', in: 'header', required: false, description: requestIdDescription, schema: { type: 'string' } },
        },
        headers: {
          RequestId: {
            description: 'The request id: the `x-request-id` you sent when it is well-formed, else a generated UUID.',
            required: true,
            schema: { type: 'string', minLength: 1, maxLength: 128 },
          },
        },
      },
    },
    hideUntagged: false,
    // Shared schemas (addSchema) keep their $id as their name under #/components/schemas.
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`),
    },
    transform: ({ schema, url, route }) => {
      if (!url.startsWith(`${partnerPrefix}/`)) return { schema: { ...schema, hide: true }, url };
      const examples = route.config?.openapi?.requestBodyExamples;
      if (!examples || !schema?.body) return { schema, url };
      return { schema: { ...schema, body: { ...(schema.body as object), 'x-examples': examples } }, url };
    },
    transformObject: (documentObject) => {
      if (!('openapiObject' in documentObject)) throw new Error('only an OpenAPI document is generated');
      const document = documentObject.openapiObject as unknown as GeneratedDocument;
      for (const pathItem of Object.values(document.paths ?? {})) {
        for (const method of httpMethods) {
          const operation = pathItem?.[method];
          if (!operation) continue;
          operation.parameters = [requestIdParameter, ...(operation.parameters ?? [])];
          for (const response of Object.values(operation.responses ?? {})) {
            if (!('$ref' in response)) response.headers = { 'x-request-id': requestIdHeader, ...response.headers };
          }
        }
      }
      // Reader's order: what the API is, where, then the operations, then the shared parts.
      const { openapi, info, servers, tags, paths, components, ...rest } = document;
      return { openapi, info, servers, tags, paths, components, ...rest } as TransformObjectResult;
    },
  });

  // One document per API version, built and serialised once (the routes do not change after
  // start), with its ETag: a request costs a lookup, never a serialisation.
  const documents = new Map<ApiVersion, SerialisedDocument>();
  app.get(
    partnerPath(partnerRoutes.openApi),
    {
      ...(shedding ? { onRequest: shedding.hook } : {}),
      schema: {
        operationId: 'getOpenApiDocument',
        summary: 'This OpenAPI document',
        description: `The OpenAPI 3.1 description of this API for one API version, generated from the service code. Needs no API key. Without \`version\`, the newest version (\`${newestApiVersion}\`).`,
        tags: ['Reference'],
        security: [],
        querystring: {
          type: 'object',
          properties: {
            version: {
              type: 'string',
              description: `The API version to describe, \`YYYY-MM-DD\`: one of ${apiVersionNames.map((v) => `\`${v}\``).join(', ')}.`,
            },
          },
        },
        headers: {
          type: 'object',
          properties: {
            'if-none-match': { type: 'string', description: 'The ETag of a copy you hold: 304 with no body when it is still current.' },
          },
        },
        response: {
          200: {
            description: 'The OpenAPI document.',
            headers: {
              etag: { type: 'string', description: 'The version of this document (changes when the service does).' },
              'cache-control': { type: 'string', description: 'Cacheable for 5 minutes, then revalidated by its ETag.' },
            },
            content: { 'application/json': { schema: OpenApiDocumentSchema } },
          },
          304: { description: 'The copy whose ETag you sent in If-None-Match is current.', type: 'null' },
          400: problemResponse(400, 'The version is not one of the API versions.', {
            unknownVersion: {
              summary: 'No such API version',
              kind: 'unsupportedApiVersion',
              detail: unknownDocumentVersion,
            },
          }),
          503: problemResponse(
            503,
            'A flood of requests without a key (this document among them) is making the service busy: repeat after Retry-After seconds.',
            { shed: { summary: 'Shed under a flood', kind: 'unavailable', detail: problemDetails.unavailable } },
            { 'retry-after': { type: 'string', pattern: '^[1-9][0-9]*$', description: 'Seconds to wait before repeating the request.' } },
          ),
        },
      },
    },
    async (request, reply) => {
      const asked = (request.query as { version?: string }).version ?? newestApiVersion;
      if (!isApiVersion(asked)) {
        const body = problem('unsupportedApiVersion', unknownDocumentVersion, request.id);
        return sendProblem(reply, Object.assign(body, { supportedVersions: apiVersionNames }));
      }
      let document = documents.get(asked);
      if (!document) {
        const body = Buffer.from(JSON.stringify(documentOfVersion(app.swagger(), asked, deprecations)), 'utf8');
        const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`;
        document = { body, gzipped: gzipSync(body), etag };
        documents.set(asked, document);
      }
      // Replaces the app's no-store: the document changes only with the service's version.
      reply.header('etag', document.etag).header('cache-control', 'public, max-age=300').header('vary', 'accept-encoding');
      if (etagMatches(request.headers['if-none-match'], document.etag)) return reply.code(304).send();
      const gzip = /\bgzip\b/.test(String(request.headers['accept-encoding'] ?? ''));
      const bytes = gzip ? document.gzipped : document.body;
      if (shedding?.overDocumentBudget(bytes.length)) return shedding.shed(request, reply);
      reply.type('application/json; charset=utf-8');
      if (gzip) return reply.header('content-encoding', 'gzip').send(bytes);
      return reply.send(bytes);
    },
  );
}
