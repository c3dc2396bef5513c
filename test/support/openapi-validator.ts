import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import formats from 'ajv-formats';
import type { FastifyInstance } from 'fastify';

/**
 * Checks real responses against the OpenAPI document the app generates, so the document and the
 * code cannot disagree unnoticed. A response is checked against the operation of its route
 * template and method: its status must be documented (exactly, else by its `4XX`/`5XX` range, else
 * `default`), its content type must be one the response documents, its body must match that
 * content's schema, and every header the response declares `required` must be present and match.
 *
 * Routes the document does not describe (the probes /livez and /readyz, which the partner document
 * leaves out on purpose) are skipped and counted. A request no route matched (Fastify's not-found
 * handler) is not an operation either, but the contract makes every error a problem: it is checked
 * against the document's shared parts, `application/problem+json` with `#/components/schemas/Problem`
 * and the `required` headers of `#/components/headers`.
 */

// biome-ignore lint/suspicious/noExplicitAny: a parsed JSON document
type Json = any;
type HeaderValue = string | string[] | number | undefined;

export interface ObservedResponse {
  method: string;
  /** The route template Fastify matched ('/partner/agents/status'); undefined when none matched. */
  route: string | undefined;
  /** The request URL, for messages only. */
  url?: string;
  statusCode: number;
  headers: Record<string, HeaderValue>;
  /** The body as sent, '' when empty. */
  body: string;
}

export interface CheckResult {
  /** false when the route is not in the document and nothing was checked. */
  checked: boolean;
  violations: string[];
}

export interface ResponseValidator {
  check(response: ObservedResponse): CheckResult;
}

const componentRefPrefix = '#/components/schemas/';
const componentIdPrefix = 'urn:openapi:components:schemas:';
const problemMediaType = 'application/problem+json';

/** `#/components/schemas/X` becomes a schema of its own, so Ajv stays strict about the rest. */
function rewriteRefs(value: Json): Json {
  if (Array.isArray(value)) return value.map(rewriteRefs);
  if (value === null || typeof value !== 'object') return value;
  const copy: Json = {};
  for (const [key, inner] of Object.entries(value)) {
    copy[key] =
      key === '$ref' && typeof inner === 'string' && inner.startsWith(componentRefPrefix)
        ? componentIdPrefix + inner.slice(componentRefPrefix.length)
        : rewriteRefs(inner);
  }
  return copy;
}

function pointer(...parts: string[]): string {
  return `#/${parts.map((part) => part.replaceAll('~', '~0').replaceAll('/', '~1')).join('/')}`;
}

function formatErrors(errors: ErrorObject[] | null | undefined): string {
  return (errors ?? [])
    .map(
      (e) =>
        `${e.instancePath || '(root)'} ${e.message ?? e.keyword}${e.keyword === 'additionalProperties' ? ` "${String(e.params.additionalProperty)}"` : ''}`,
    )
    .join('; ');
}

function mediaTypeOf(value: HeaderValue): string | undefined {
  if (value === undefined) return undefined;
  return String(Array.isArray(value) ? value[0] : value)
    .split(';', 1)[0]!
    .trim()
    .toLowerCase();
}

const isJson = (mediaType: string) => mediaType === 'application/json' || mediaType.endsWith('+json');

/** A Fastify route template as an OpenAPI path: `/agents/:id` is `/agents/{id}`. */
export function openApiPath(route: string): string {
  return route.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
}

/**
 * An Ajv for the schemas of an OpenAPI 3.1 document: JSON Schema 2020-12 plus the few annotations
 * of OpenAPI's dialect, formats checked, strict (an unknown keyword is an error, except that
 * `required` may name properties left undeclared). `#/components/schemas/X` references resolve.
 */
export function createSchemaCompiler(document: Json) {
  const ajv = new Ajv2020({ strict: true, strictRequired: false, allErrors: true });
  formats.default(ajv);
  ajv.addVocabulary(['example', 'xml', 'externalDocs', 'discriminator']);
  for (const [name, schema] of Object.entries<Json>(document.components?.schemas ?? {})) {
    ajv.addSchema({ ...rewriteRefs(schema), $id: componentIdPrefix + name });
  }
  return { ajv, compile: (schema: Json): ValidateFunction => ajv.compile(rewriteRefs(schema)) };
}

export function createResponseValidator(document: Json): ResponseValidator {
  const schemas = createSchemaCompiler(document);
  const compiled = new Map<string, ValidateFunction>();
  function compile(where: string, schema: Json): ValidateFunction {
    let validate = compiled.get(where);
    if (!validate) {
      validate = schemas.compile(schema);
      compiled.set(where, validate);
    }
    return validate;
  }

  function resolve(value: Json): Json {
    if (value && typeof value.$ref === 'string' && value.$ref.startsWith('#/')) {
      return value.$ref
        .slice(2)
        .split('/')
        .reduce((node: Json, part: string) => node?.[part.replaceAll('~1', '/').replaceAll('~0', '~')], document);
    }
    return value;
  }

  /** Checks status-independent parts: content type, body, required headers. */
  function checkAgainst(responseObject: Json, where: string, response: ObservedResponse, violations: string[]) {
    for (const [name, headerOrRef] of Object.entries<Json>(responseObject.headers ?? {})) {
      const header = resolve(headerOrRef);
      const value = response.headers[name.toLowerCase()];
      if (value === undefined) {
        if (header?.required) violations.push(`required header ${name} is missing`);
        continue;
      }
      if (header?.schema) {
        const validate = compile(`${where}/headers/${name}/schema`, header.schema);
        if (!validate(String(value))) violations.push(`header ${name} does not match its schema: ${formatErrors(validate.errors)}`);
      }
    }

    const content: Json = responseObject.content;
    if (!content || Object.keys(content).length === 0) {
      if (response.body !== '') violations.push(`${where} documents no body, but one was sent`);
      return;
    }
    const mediaType = mediaTypeOf(response.headers['content-type']);
    if (mediaType === undefined) {
      violations.push(`no content-type; documented: ${Object.keys(content).join(', ')}`);
      return;
    }
    const key = [mediaType, `${mediaType.split('/')[0]}/*`, '*/*'].find((candidate) => candidate in content);
    if (key === undefined) {
      violations.push(`content type ${mediaType} is not documented for ${where}; documented: ${Object.keys(content).join(', ')}`);
      return;
    }
    const schema = content[key].schema;
    if (!schema) return;
    let body: unknown = response.body;
    if (isJson(mediaType)) {
      try {
        body = JSON.parse(response.body);
      } catch {
        violations.push(`body is not JSON although the content type is ${mediaType}`);
        return;
      }
    }
    const schemaPointer = `${where}/content/${key.replaceAll('/', '~1')}/schema`;
    const validate = compile(schemaPointer, schema);
    if (!validate(body)) violations.push(`body does not match ${schemaPointer}: ${formatErrors(validate.errors)}`);
    if (mediaType === problemMediaType && (body as { status?: unknown } | null)?.status !== response.statusCode) {
      violations.push(`problem status ${String((body as { status?: unknown } | null)?.status)} differs from the HTTP status`);
    }
  }

  /**
   * What a response no route matched must look like: a problem, carrying the headers that every
   * documented response declares required (x-request-id).
   */
  const everyResponse: Json[] = Object.values<Json>(document.paths ?? {})
    .flatMap((pathItem) => Object.values<Json>(pathItem ?? {}))
    .flatMap((operation) => Object.values<Json>(operation?.responses ?? {}).map(resolve));
  const sharedRequiredHeaders = Object.fromEntries(
    Object.entries<Json>(everyResponse[0]?.headers ?? {}).filter(
      ([name, header]) => resolve(header)?.required && everyResponse.every((r) => resolve(r.headers?.[name])?.required),
    ),
  );
  const unmatchedResponse = {
    headers: sharedRequiredHeaders,
    content: { [problemMediaType]: { schema: { $ref: `${componentRefPrefix}Problem` } } },
  };

  return {
    check(response) {
      const label = `${response.method} ${response.url ?? response.route ?? '?'} -> ${response.statusCode}`;
      const violations: string[] = [];
      if (response.route === undefined) {
        checkAgainst(unmatchedResponse, '(no route matched)', response, violations);
        return { checked: true, violations: violations.map((v) => `${label}: ${v}`) };
      }
      const path = openApiPath(response.route);
      const method = response.method.toLowerCase();
      const operation = document.paths?.[path]?.[method];
      if (!operation) return { checked: false, violations: [] };

      const status = String(response.statusCode);
      const responses: Json = operation.responses ?? {};
      const statusKey = [status, `${status[0]}XX`, 'default'].find((candidate) => candidate in responses);
      if (statusKey === undefined) {
        violations.push(
          `status ${status} is not documented for ${method.toUpperCase()} ${path}; documented: ${Object.keys(responses).join(', ')}`,
        );
      } else {
        checkAgainst(resolve(responses[statusKey]), pointer('paths', path, method, 'responses', statusKey), response, violations);
      }
      return { checked: true, violations: violations.map((v) => `${label}: ${v}`) };
    },
  };
}

export interface AttachedResponseValidator {
  /** Every violation seen so far, one line each. */
  readonly violations: string[];
  /** Responses checked, and responses of routes the document does not describe. */
  readonly counts: { checked: number; skipped: number };
  /** Throws, listing them, when any response disagreed with the document. */
  assertNoViolations(): void;
}

/**
 * Checks every response the app sends (an onSend hook, so after serialization, as it goes on the
 * wire) against the document the app itself generates. Add it before the app is ready.
 */
// biome-ignore lint/suspicious/noExplicitAny: the plugin takes any logger and type provider
export function attachResponseValidator(app: FastifyInstance<any, any, any, any, any>): AttachedResponseValidator {
  const violations: string[] = [];
  const counts = { checked: 0, skipped: 0 };
  let validator: ResponseValidator | undefined;
  app.addHook('onSend', async (request, reply, payload) => {
    try {
      // The document exists once the app is ready, which it is by the time anything is sent.
      validator ??= createResponseValidator(app.swagger());
      let body: string;
      if (payload === null || payload === undefined) body = '';
      else if (typeof payload === 'string') body = payload;
      else if (Buffer.isBuffer(payload)) body = payload.toString('utf8');
      else {
        violations.push(`${request.method} ${request.url} -> ${reply.statusCode}: the body is a stream and cannot be checked`);
        return payload;
      }
      const result = validator.check({
        method: request.method,
        route: request.is404 ? undefined : request.routeOptions.url,
        url: request.url,
        statusCode: reply.statusCode,
        headers: reply.getHeaders() as Record<string, HeaderValue>,
        body,
      });
      if (result.checked) counts.checked += 1;
      else counts.skipped += 1;
      violations.push(...result.violations);
    } catch (error) {
      violations.push(`${request.method} ${request.url}: the response validator failed: ${(error as Error).message}`);
    }
    return payload;
  });
  return {
    violations,
    counts,
    assertNoViolations() {
      if (violations.length > 0) {
        throw new Error(
          `${violations.length} response(s) disagree with the OpenAPI document (src/http/routes/*.ts schemas, docs/openapi.json):\n  ${violations.join('\n  ')}`,
        );
      }
    },
  };
}
