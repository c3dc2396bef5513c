// NACK's Stream (the events' JetStream stream, docs/interfaces.md §14) checked against the OpenAPI
// schema of its CRD (a fixture taken from the NACK repository; its origin is in the fixture's
// $comment): no model package covers it. Closed like the BackendTrafficPolicy's, so a misspelt
// field fails the test instead of being pruned by the API server.
import { readFileSync } from 'node:fs';
import { Ajv } from 'ajv';
import { closed, describeErrors } from './envoy-gateway.js';

const fixture = new URL('./fixtures/nack-stream.schema.json', import.meta.url);
const validate = new Ajv({ allErrors: true, strict: true }).compile(closed(JSON.parse(readFileSync(fixture, 'utf8'))) as object);

/** Throws with Ajv's errors when the object does not match the CRD's schema. */
export function validateNackStream(object: unknown): void {
  if (!validate(object)) throw new Error(describeErrors(validate.errors));
}
