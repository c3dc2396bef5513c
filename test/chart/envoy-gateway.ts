// Envoy Gateway's BackendTrafficPolicy checked against the OpenAPI schema of its CRD (a fixture
// taken from the Envoy Gateway release the kind scripts install; its origin is in the fixture's
// $comment). The npm package @kubernetes-models/envoy-gateway 2.0.0 predates Envoy Gateway 1.9
// (no xRateLimitHeaders, no Week unit) and accepts unknown fields, so the CRD itself is the
// reference here. The API server prunes fields a structural schema does not know, silently:
// this check refuses them instead, so a misspelt field fails the test rather than vanishing.
import { readFileSync } from 'node:fs';
import { Ajv, type ErrorObject } from 'ajv';
import formats from 'ajv-formats';

const fixture = new URL('./fixtures/envoy-gateway-backendtrafficpolicy.schema.json', import.meta.url);

type Schema = { [keyword: string]: unknown };

/** Every object schema that lists its properties refuses the others, as pruning would drop them. */
export function closed(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(closed);
  if (schema === null || typeof schema !== 'object') return schema;
  const copy: Schema = {};
  for (const [keyword, value] of Object.entries(schema)) {
    copy[keyword] =
      keyword === 'properties'
        ? Object.fromEntries(Object.entries(value as Schema).map(([name, property]) => [name, closed(property)]))
        : keyword === 'x-kubernetes-validations'
          ? value
          : closed(value);
  }
  if (copy.properties !== undefined && copy.additionalProperties === undefined) copy.additionalProperties = false;
  return copy;
}

const ajv = new Ajv({ allErrors: true, strict: true });
formats.default(ajv);
// The CEL rules are kept in the fixture as documentation; Ajv cannot evaluate them.
ajv.addKeyword({ keyword: 'x-kubernetes-validations', schemaType: 'array' });
ajv.addKeyword({ keyword: 'message', schemaType: 'string' });
ajv.addKeyword({ keyword: 'rule', schemaType: 'string' });

const validate = ajv.compile(closed(JSON.parse(readFileSync(fixture, 'utf8'))) as Schema);

export function describeErrors(errors: ErrorObject[] | null | undefined): string {
  return (errors ?? []).map((error) => `${error.instancePath || '/'} ${error.message ?? ''} ${JSON.stringify(error.params)}`).join('; ');
}

/** Throws with Ajv's errors when the object does not match the CRD's schema. */
export function validateBackendTrafficPolicy(object: unknown): void {
  if (!validate(object)) throw new Error(describeErrors(validate.errors));
}
