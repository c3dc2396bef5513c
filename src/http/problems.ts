import type { FastifyReply } from 'fastify';
import { documentedPath, partnerRoutes } from './paths.js';

// What a partner reads, in one file: the problem types with their titles, and every detail and
// text the answers say (the error handler, the guard, the routes and their documentation take
// them from here).

/**
 * RFC 9457 problem details. Every error the service answers is one of these types; `type` is a
 * stable URN partners can match on, `detail` says what to fix, `requestId` ties it to our logs.
 * A disable that committed its flag adds how far it got (docs/interfaces.md §7).
 */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  requestId: string;
  pausedCampaignCount?: number;
  remainingCampaignCount?: number;
  /** A bulk change's 400: where the first bad change is (a JSON Pointer into the body) and what is wrong with it. */
  errors?: Array<{ pointer: string; detail: string }>;
}

export const problemTypes = {
  validation: { status: 400, title: 'Invalid request' },
  unsupportedApiVersion: { status: 400, title: 'Unsupported API version' },
  unauthorized: { status: 401, title: 'Missing or unknown API key' },
  notFound: { status: 404, title: 'Not found' },
  methodNotAllowed: { status: 405, title: 'Method not allowed' },
  superseded: { status: 409, title: 'Superseded by a later enable' },
  idempotencyKeyInUse: { status: 409, title: 'Idempotency key in use' },
  webhookEndpointLimit: { status: 409, title: 'Too many webhook endpoints' },
  eventsGone: { status: 410, title: 'Events no longer kept' },
  preconditionFailed: { status: 412, title: 'Precondition failed' },
  idempotencyKeyReused: { status: 422, title: 'Idempotency key reused' },
  payloadTooLarge: { status: 413, title: 'Request body too large' },
  unsupportedMediaType: { status: 415, title: 'Unsupported media type' },
  expectationFailed: { status: 417, title: 'Expectation failed' },
  rateLimited: { status: 429, title: 'Rate limit exceeded' },
  tooManyDisables: { status: 429, title: 'Too many disables in flight' },
  idempotencyKeyQuota: { status: 429, title: 'Too many idempotency keys' },
  webhookLookupsBusy: { status: 429, title: 'Too many webhook registrations under way' },
  tooManyStreams: { status: 429, title: 'Too many event streams' },
  dependencyFailure: { status: 500, title: 'Dependency failure' },
  internal: { status: 500, title: 'Internal error' },
  unavailable: { status: 503, title: 'Service unavailable' },
} as const;

export type ProblemKind = keyof typeof problemTypes;

const typeUris = Object.fromEntries(
  Object.keys(problemTypes).map((kind) => [
    kind,
    `urn:partner-agent-status:problem:${kind.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`,
  ]),
) as Record<ProblemKind, string>;

/**
 * The kinds whose answer means the request changed nothing: the partner fixes it (or waits
 * `Retry-After`) and sends it again. The others may follow a change: a superseded disable paused
 * campaigns before the enable, a 500 may come after the change was recorded. The partner guide's
 * error table says the same in its "Changed" column (test/unit/docs.test.ts holds them equal).
 */
export const changesNothing: ReadonlySet<ProblemKind> = new Set<ProblemKind>([
  'validation',
  'unsupportedApiVersion',
  'unauthorized',
  'notFound',
  'methodNotAllowed',
  'idempotencyKeyInUse',
  'webhookEndpointLimit',
  'preconditionFailed',
  'idempotencyKeyReused',
  'payloadTooLarge',
  'unsupportedMediaType',
  'expectationFailed',
  'rateLimited',
  'tooManyDisables',
  'idempotencyKeyQuota',
  'webhookLookupsBusy',
  'tooManyStreams',
  'eventsGone',
  'unavailable',
]);

export function problem(
  kind: ProblemKind,
  detail: string,
  requestId: string,
  extension?: Pick<Problem, 'pausedCampaignCount' | 'remainingCampaignCount' | 'errors'>,
): Problem {
  const { status, title } = problemTypes[kind];
  const body: Problem = { type: typeUris[kind], title, status, detail, requestId };
  return extension ? Object.assign(body, extension) : body;
}

export function sendProblem(reply: FastifyReply, body: Problem): FastifyReply {
  return reply.code(body.status).type('application/problem+json').send(body);
}

/** Where a partner follows a disable that goes on by itself. */
const progressAt = `GET ${documentedPath(partnerRoutes.agentStatusRead)} shows the progress. Repeating the request is safe.`;

/** What a 500 or 409 says; each stays true whatever the request was. */
export const problemDetails = {
  pause:
    'A system holding campaign state did not confirm every pause. The agent is disabled, and the service keeps pausing the remaining campaigns by itself; ' +
    progressAt,
  deadline:
    'The agent is disabled, but pausing its campaigns takes longer than one request may. The service keeps pausing them by itself; ' +
    progressAt,
  recorded:
    'The disable is recorded, but the agent is not disabled in the database yet (another transaction holds it, or the database stopped answering). The service disables the agent and pauses its campaigns by itself as soon as it can; ' +
    progressAt,
  poolFull:
    'Every database connection of this replica stayed busy for as long as the request could wait. Nothing was changed; repeat the request after the number of seconds in Retry-After.',
  database: 'The database did not answer; the change may not have been made. Repeat the request: it is always safe to repeat.',
  superseded:
    'An enable of this agent was answered after this disable was requested, so this disable stopped pausing campaigns. The agent is enabled.',
  rateLimited: 'Your network has used up its requests for this window. Wait for the number of seconds in Retry-After.',
  unavailable: 'The service is overloaded or shutting down. Repeat the request after the number of seconds in Retry-After.',
  unexpected: 'An unexpected error occurred.',
} as const;

/** The largest request body the partner API reads. */
export const bodyLimitBytes = 16 * 1024;

/**
 * The partner-facing texts that more than one place says (answers, the OpenAPI document's
 * examples), defined once. None of them ever holds what the partner sent.
 */
export const partnerTexts = {
  missingKey: 'x-api-key header is required',
  unknownKey: 'API key is not valid',
  notInNetwork: 'No agent with this agentId exists in your network.',
  /** No route: the path is never echoed (a key pasted into a URL would come back in the body). */
  noRoute: `No such route. The partner API is POST ${documentedPath(partnerRoutes.agentStatus)} and GET ${documentedPath(partnerRoutes.agentStatusRead)}.`,
  notJson: 'Content-Type must be application/json.',
  notUtf8: 'The body must be JSON in UTF-8: Content-Type application/json with no charset or charset=utf-8.',
  encoded: 'Content-Encoding is not accepted: send the JSON body as it is, uncompressed.',
  duplicateMember: 'body repeats a member name within one object; send each member once',
  notObject: 'body must be a JSON object',
  invalidJson: 'body is not valid JSON',
  badUrl: 'The request URL is malformed.',
  longParameter: 'A path parameter is too long.',
  notRouted: 'The request could not be routed.',
  missingHost: 'An HTTP/1.1 request must carry a Host header.',
  expectation: 'The only expectation the service meets is Expect: 100-continue.',
  bodyTooLarge: `The request body must be at most ${bodyLimitBytes / 1024} KiB.`,
  tooManyDisables: (limit: number) =>
    `Your network already has ${limit} agents being disabled. Repeat the request after the number of seconds in Retry-After.`,
  methodNotAllowed: (method: string, allowed: readonly string[]) => `${method} is not allowed here; use ${allowed.join(' or ')}.`,
} as const;

/** What the partner reads in the answers of the conveniences (docs/interfaces.md §11); none of it ever holds what the partner sent. */
export const convenienceTexts = {
  malformedKey:
    'Idempotency-Key must be sent once, with 1 to 255 printable ASCII characters (a UUID, say), and must not be an API key. Nothing was changed.',
  keyReused:
    'This Idempotency-Key was used for another request (another agentId or enabled) within the last 24 hours. Use a new key for a new request.',
  keyInUse:
    'The first request with this Idempotency-Key is still being answered. Repeat after the number of seconds in Retry-After to get its answer.',
  keyLost:
    'This request waited so long that a repeat with the same Idempotency-Key took the key over; this request changed nothing. Repeat after the number of seconds in Retry-After to get the answer of the request that holds the key.',
  keyQuota:
    'Your network holds as many Idempotency-Keys as it may (each is kept 24 hours). Nothing was changed. Repeat after the number of seconds in Retry-After, or send the request without a new key.',
  preconditionFailed:
    'The agent changed since the ETag given in If-Match (or the tag is not one this service sent). Nothing was changed or recorded; read the status again for the current ETag.',
  historyQuery: 'limit must be a whole number from 1 to 100, and before a changeId (a whole number from 1).',
} as const;

/** The largest body of a bulk change (docs/interfaces.md §16). */
export const batchBodyLimitBytes = 256 * 1024;

/** The most changes one bulk change may hold. */
export const maxBatchChanges = 1_000;

/** What a partner reads in the answers of bulk changes (docs/interfaces.md §16); none of it holds what the partner sent. */
export const batchTexts = {
  invalid: (index: number | undefined) =>
    index === undefined
      ? `The body must be {"changes": [...]} with 1 to ${maxBatchChanges} changes. Nothing was changed.`
      : `Change ${index} is not valid (see errors). Nothing was changed.`,
  bodyTooLarge: `The request body of a bulk change must be at most ${batchBodyLimitBytes / 1024} KiB.`,
  repeatedAgent: 'this agentId appears earlier in the same batch; each agent may be changed at most once per batch',
  notFound: 'No bulk change with this id exists in your network (bulk changes are kept 24 hours).',
  keyReused: 'This Idempotency-Key was used for another bulk change within the last 24 hours. Use a new key for a new batch.',
  keyInUse: 'The first bulk change with this Idempotency-Key is still being made. Repeat after the number of seconds in Retry-After.',
  rateLimited: (changes: number) =>
    `Your network's remaining requests in this window cannot hold this batch (each of its ${changes} changes counts as one request). Nothing was changed. Wait for the number of seconds in Retry-After, or send a smaller batch.`,
} as const;
