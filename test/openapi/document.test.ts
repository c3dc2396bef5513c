import { readFileSync } from 'node:fs';
import { Validator } from '@seriousme/openapi-schema-validator';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  buildInertApp,
  generateOpenApiDocument,
  openApiDocumentPath,
  renderOpenApiDocument,
  versionDocumentPath,
} from '../../scripts/generate-openapi.js';
import { apiVersionNames } from '../../src/api-versions.js';
import { problemTypes } from '../../src/http/problems.js';
import { createSchemaCompiler } from '../support/openapi-validator.js';
import { statusPath, urls } from '../support/partner.js';

// biome-ignore lint/suspicious/noExplicitAny: a parsed JSON document
type Json = any;

const methods = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

let generated: Json;

beforeAll(async () => {
  generated = await generateOpenApiDocument();
});

function operations(document: Json): Array<[string, string, Json]> {
  return Object.entries<Json>(document.paths).flatMap(([path, item]) =>
    methods.filter((method) => item[method]).map((method): [string, string, Json] => [path, method, item[method]]),
  );
}

function resolve(document: Json, value: Json): Json {
  if (typeof value?.$ref !== 'string') return value;
  return value.$ref
    .slice(2)
    .split('/')
    .reduce((node: Json, part: string) => node?.[part.replaceAll('~1', '/').replaceAll('~0', '~')], document);
}

describe('docs/openapi.json is what the code generates', () => {
  it('equals the committed file', () => {
    const committed = readFileSync(openApiDocumentPath, 'utf8');
    expect(committed, 'docs/openapi.json is out of date with the route schemas: run `npm run openapi` and commit docs/openapi.json').toBe(
      renderOpenApiDocument(generated),
    );
  });

  it('is served at GET /partner/openapi.json without a key, with a request id', async () => {
    const app = await buildInertApp();
    try {
      await app.ready();
      const response = await app.inject({ method: 'GET', url: urls.openApi });
      expect(response.statusCode).toBe(200);
      expect(response.headers['content-type']).toMatch(/^application\/json/);
      expect(response.headers['x-request-id']).toBeTruthy();
      // Byte for byte: the serializer keeps every field, in the document's order.
      expect(response.body).toBe(JSON.stringify(generated));
    } finally {
      await app.close();
    }
  });
});

describe('the document of each API version (docs/interfaces.md §15)', () => {
  it('is committed as docs/openapi-<version>.json, equal to what GET /partner/openapi.json?version= serves', async () => {
    const app = await buildInertApp();
    try {
      await app.ready();
      for (const version of apiVersionNames) {
        const response = await app.inject({ method: 'GET', url: `${urls.openApi}?version=${version}` });
        expect(response.statusCode, version).toBe(200);
        const served = JSON.parse(response.body);
        expect(
          readFileSync(versionDocumentPath(version), 'utf8'),
          `docs/openapi-${version}.json is out of date: run \`npm run openapi\``,
        ).toBe(renderOpenApiDocument(served));
        expect(served.info.version).toBe(version);
      }
    } finally {
      await app.close();
    }
  });

  it('is the newest version without ?version=, and docs/openapi.json is that one', () => {
    expect(generated.info.version).toBe(apiVersionNames.at(-1));
    expect(readFileSync(openApiDocumentPath, 'utf8')).toBe(readFileSync(versionDocumentPath(apiVersionNames.at(-1)!), 'utf8'));
  });

  it('lists Partner-Api-Version on every operation that takes a key, with the versions as its values', async () => {
    for (const version of apiVersionNames) {
      const document: Json = await generateOpenApiDocument(version);
      for (const [path, method, operation] of operations(document)) {
        const keyed = operation.security?.length !== 0;
        expect(
          operation.parameters.some((p: Json) => p.$ref === '#/components/parameters/PartnerApiVersion'),
          `${version} ${method} ${path}`,
        ).toBe(keyed);
      }
      expect(resolve(document, { $ref: '#/components/parameters/PartnerApiVersion' })).toMatchObject({
        name: 'Partner-Api-Version',
        in: 'header',
        schema: { enum: apiVersionNames },
      });
      const passes = await new Validator().validate(structuredClone(document));
      expect(passes.valid, `${version}: ${JSON.stringify(passes.errors)}`).toBe(true);
    }
  });

  it('tells what each version answers to a disable left unfinished: 500 in 2026-11-21, 202 in 2026-12-01', async () => {
    const old = ((await generateOpenApiDocument('2026-11-21')) as Json).paths[statusPath].post.responses;
    const newest = ((await generateOpenApiDocument('2026-12-01')) as Json).paths[statusPath].post.responses;
    expect(old['500'].description).toContain('remainingCampaignCount');
    expect(newest['500'].description).toContain('Nothing was recorded');
    expect(newest['202'].description).toContain('did not confirm every pause');
  });
});

describe('the document is valid OpenAPI 3.1', () => {
  it('passes the OpenAPI 3.1 schema', async () => {
    const validator = new Validator();
    const result = await validator.validate(structuredClone(generated));
    expect(result.errors, JSON.stringify(result.errors, null, 2)).toBeUndefined();
    expect(result.valid).toBe(true);
    expect(validator.version).toBe('3.1');
  });

  it('has schemas that are sound JSON Schema 2020-12, and examples that match them', () => {
    const { ajv, compile } = createSchemaCompiler(generated);
    const checked: string[] = [];
    const expectValid = (where: string, schema: Json, value: unknown) => {
      const validate = compile(schema);
      expect(validate(value), `${where}: ${ajv.errorsText(validate.errors)}`).toBe(true);
      checked.push(where);
    };
    // JSON Schema `examples` inside schemas (e.g. of a property).
    const walk = (where: string, schema: Json) => {
      for (const [i, value] of (schema.examples ?? []).entries()) expectValid(`${where}/examples/${i}`, schema, value);
      for (const [name, property] of Object.entries<Json>(schema.properties ?? {})) walk(`${where}/properties/${name}`, property);
    };

    for (const [name, schema] of Object.entries<Json>(generated.components.schemas)) {
      compile(schema);
      walk(`#/components/schemas/${name}`, schema);
    }
    for (const [path, method, operation] of operations(generated)) {
      const media: Array<[string, Json]> = [];
      for (const [type, content] of Object.entries<Json>(operation.requestBody?.content ?? {})) {
        media.push([`${method.toUpperCase()} ${path} request ${type}`, content]);
      }
      for (const [status, response] of Object.entries<Json>(operation.responses)) {
        for (const [type, content] of Object.entries<Json>(resolve(generated, response).content ?? {})) {
          media.push([`${method.toUpperCase()} ${path} ${status} ${type}`, content]);
        }
      }
      for (const [where, content] of media) {
        compile(content.schema);
        walk(where, content.schema);
        for (const [name, example] of Object.entries<Json>(content.examples ?? {}))
          expectValid(`${where} example ${name}`, content.schema, example.value);
        if ('example' in content) expectValid(`${where} example`, content.schema, content.example);
      }
    }
    // 2 request bodies, 2 answers of 200, at least one for each of the 6 errors, an agentId.
    expect(checked.length).toBeGreaterThanOrEqual(2 + 2 + 6 + 1);
  });
});

describe('the document is a partner reference', () => {
  it('documents the partner routes only: not the probes', () => {
    expect(Object.keys(generated.paths).sort()).toEqual([
      statusPath,
      '/partner/agents/status/batch',
      '/partner/agents/status/batch/{batchId}',
      '/partner/agents/{agentId}/status',
      '/partner/agents/{agentId}/status-changes',
      '/partner/events',
      urls.openApi,
      urls.webhookEndpoints,
      '/partner/webhook-endpoints/{endpointId}',
      '/partner/webhook-endpoints/{endpointId}/deliveries',
      '/partner/webhook-endpoints/{endpointId}/deliveries/{deliveryId}/retry',
      '/partner/webhook-endpoints/{endpointId}/enable',
      '/partner/webhook-endpoints/{endpointId}/rotate-secret',
    ]);
  });

  it('gives every operation an operationId, a summary, a description and a tag, and every response a description', () => {
    const ids = new Set<string>();
    for (const [path, method, operation] of operations(generated)) {
      const where = `${method.toUpperCase()} ${path}`;
      expect(operation.operationId, where).toMatch(/^[A-Za-z]+$/);
      expect(ids.has(operation.operationId), `${where} operationId is unique`).toBe(false);
      ids.add(operation.operationId);
      expect(operation.summary, where).toBeTruthy();
      expect(operation.description, where).toBeTruthy();
      expect(operation.tags?.length, where).toBeGreaterThan(0);
      for (const tag of operation.tags)
        expect(
          generated.tags.map((t: Json) => t.name),
          where,
        ).toContain(tag);
      for (const [status, response] of Object.entries<Json>(operation.responses)) {
        const description = resolve(generated, response).description;
        expect(description, `${where} ${status}`).toBeTruthy();
        expect(description, `${where} ${status}`).not.toBe('Default Response');
      }
    }
  });

  it('requires the x-api-key scheme on the status operation only', () => {
    expect(generated.components.securitySchemes).toEqual({
      apiKey: expect.objectContaining({ type: 'apiKey', in: 'header', name: 'x-api-key' }),
    });
    expect(generated.security).toBeUndefined();
    expect(generated.paths[statusPath].post.security).toEqual([{ apiKey: [] }]);
    expect(generated.paths[urls.openApi].get.security).toEqual([]);
  });

  it('has x-request-id as an optional request header and a required header of every response', () => {
    expect(resolve(generated, { $ref: '#/components/parameters/RequestId' })).toMatchObject({
      name: 'x-request-id',
      in: 'header',
      required: false,
    });
    expect(resolve(generated, { $ref: '#/components/headers/RequestId' })).toMatchObject({ required: true, schema: { type: 'string' } });
    for (const [path, method, operation] of operations(generated)) {
      expect(operation.parameters, `${method} ${path}`).toContainEqual({ $ref: '#/components/parameters/RequestId' });
      for (const [status, response] of Object.entries<Json>(operation.responses)) {
        expect(response.headers?.['x-request-id'], `${method} ${path} ${status}`).toEqual({ $ref: '#/components/headers/RequestId' });
      }
    }
  });

  it('documents 200 and every error of the status operation, errors as problem+json with the shared Problem schema', () => {
    const responses = generated.paths[statusPath].post.responses;
    expect(Object.keys(responses).sort()).toEqual([
      '200',
      '202',
      '400',
      '401',
      '404',
      '409',
      '412',
      '413',
      '415',
      '422',
      '429',
      '500',
      '503',
    ]);
    expect(Object.keys(responses['200'].content)).toEqual(['application/json']);
    const knownTypes = new Map(
      Object.entries(problemTypes).map(([kind, { status, title }]) => [
        `urn:partner-agent-status:problem:${kind.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`,
        { status, title },
      ]),
    );
    for (const status of ['400', '401', '404', '409', '412', '413', '415', '422', '429', '500', '503']) {
      const { content } = responses[status];
      expect(Object.keys(content), status).toEqual(['application/problem+json']);
      expect(content['application/problem+json'].schema, status).toEqual({ $ref: '#/components/schemas/Problem' });
      const examples = Object.values<Json>(content['application/problem+json'].examples);
      expect(examples.length, status).toBeGreaterThan(0);
      for (const { value } of examples) {
        expect(value.status, status).toBe(Number(status));
        expect(knownTypes.get(value.type), `${status} ${value.type}`).toEqual({ status: Number(status), title: value.title });
      }
    }
    expect(generated.components.schemas.Problem).toMatchObject({
      type: 'object',
      additionalProperties: false,
      required: ['type', 'title', 'status', 'detail', 'requestId'],
    });
  });

  it('states the rules of the service in its description', () => {
    const text = `${generated.info.description}\n${generated.paths[statusPath].post.description}`;
    for (const rule of [
      /relational database, the spending periods of the spend-management system and the key-value store/,
      /resumes nothing/,
      /paused by a disable stay paused/,
      /identical to the one for an agent that does not exist at all/,
      /Repeating a request is always safe/,
      /goes on pausing the remaining campaigns by itself, without any further request/,
      /supersedes it: that disable stops and answers 409/,
      /counted across all replicas/,
      /`x-api-key` header/,
    ]) {
      expect(text).toMatch(rule);
    }
    expect(generated.servers).toEqual([expect.objectContaining({ url: '/' })]);
  });
});

describe('docs/partner-guide.md agrees with the document', () => {
  it('shows bodies that match the documented schemas', () => {
    const guide = readFileSync(new URL('../../docs/partner-guide.md', import.meta.url), 'utf8');
    const bodies = [...guide.matchAll(/```(?:json|http)\n([\s\S]*?)```/g)].map((m) => m[1]!.trim().split('\n\n').at(-1)!);
    const { compile } = createSchemaCompiler(generated);
    const responses = generated.paths[statusPath].post.responses;
    const success = compile(responses['200'].content['application/json'].schema);
    const status = compile(generated.paths['/partner/agents/{agentId}/status'].get.responses['200'].content['application/json'].schema);
    const history = compile(
      generated.paths['/partner/agents/{agentId}/status-changes'].get.responses['200'].content['application/json'].schema,
    );
    const batch = compile(generated.paths['/partner/agents/status/batch'].post.responses['200'].content['application/json'].schema);
    const problemBody = compile(generated.components.schemas.Problem);
    let problems = 0;
    for (const text of bodies) {
      const body = JSON.parse(text);
      if ('type' in body) {
        problems += 1;
        expect(problemBody(body), text).toBe(true);
        expect(Object.keys(responses), text).toContain(String(body.status));
        const documented = Object.values<Json>(responses[String(body.status)].content['application/problem+json'].examples).map(
          (e) => e.value,
        );
        expect(
          documented.map(({ type, title }: Json) => ({ type, title })),
          text,
        ).toContainEqual({ type: body.type, title: body.title });
      } else {
        expect(success(body) || status(body) || history(body) || batch(body), text).toBe(true);
      }
    }
    expect(problems).toBeGreaterThanOrEqual(6);
    expect(bodies.length - problems).toBe(9);
  });
});
