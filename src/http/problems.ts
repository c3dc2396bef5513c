import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { AgentNotInNetwork, DisableIncomplete, DisableSuperseded, TooManyDisables } from '../agents/set-agent-status.js';
import { redactKnownKeys } from '../auth/key-finder.js';
import { DependencyError } from '../observability/dependency-calls.js';

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
}

export const problemTypes = {
  validation: { status: 400, title: 'Invalid request' },
  unauthorized: { status: 401, title: 'Missing or unknown API key' },
  notFound: { status: 404, title: 'Not found' },
  methodNotAllowed: { status: 405, title: 'Method not allowed' },
  superseded: { status: 409, title: 'Superseded by a later enable' },
  idempotencyKeyInUse: { status: 409, title: 'Idempotency key in use' },
  webhookEndpointLimit: { status: 409, title: 'Too many webhook endpoints' },
  preconditionFailed: { status: 412, title: 'Precondition failed' },
  idempotencyKeyReused: { status: 422, title: 'Idempotency key reused' },
  payloadTooLarge: { status: 413, title: 'Request body too large' },
  unsupportedMediaType: { status: 415, title: 'Unsupported media type' },
  expectationFailed: { status: 417, title: 'Expectation failed' },
  rateLimited: { status: 429, title: 'Rate limit exceeded' },
  tooManyDisables: { status: 429, title: 'Too many disables in flight' },
  idempotencyKeyQuota: { status: 429, title: 'Too many idempotency keys' },
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

export function problem(
  kind: ProblemKind,
  detail: string,
  requestId: string,
  extension?: Pick<Problem, 'pausedCampaignCount' | 'remainingCampaignCount'>,
): Problem {
  const { status, title } = problemTypes[kind];
  const body: Problem = { type: typeUris[kind], title, status, detail, requestId };
  return extension ? Object.assign(body, extension) : body;
}

export function sendProblem(reply: FastifyReply, body: Problem): FastifyReply {
  return reply.code(body.status).type('application/problem+json').send(body);
}

/** What a 500 or 409 says; each stays true whatever the request was. */
export const problemDetails = {
  pause:
    'A system holding campaign state did not confirm every pause. The agent is disabled, and the service keeps pausing the remaining campaigns by itself; ' +
    'GET /partner/agents/{agentId}/status shows the progress. Repeating the request is safe.',
  deadline:
    'The agent is disabled, but pausing its campaigns takes longer than one request may. The service keeps pausing them by itself; ' +
    'GET /partner/agents/{agentId}/status shows the progress. Repeating the request is safe.',
  recorded:
    'The disable is recorded, but another transaction holds the agent in the database. The service disables the agent and pauses its campaigns by itself as soon as it is free; ' +
    'GET /partner/agents/{agentId}/status shows the progress. Repeating the request is safe.',
  database: 'The database did not answer; the change may not have been made. Repeat the request: it is always safe to repeat.',
  superseded:
    'An enable of this agent was answered after this disable was requested, so this disable stopped pausing campaigns. The agent is enabled.',
  rateLimited: 'Your network has used up its requests for this window. Wait for the number of seconds in Retry-After.',
  unavailable: 'The service is overloaded or shutting down. Repeat the request after the number of seconds in Retry-After.',
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
  noRoute: 'No such route. The partner API is POST /partner/agents/status and GET /partner/agents/{agentId}/status.',
  notJson: 'Content-Type must be application/json.',
  notUtf8: 'The body must be JSON in UTF-8: Content-Type application/json with no charset or charset=utf-8.',
  encoded: 'Content-Encoding is not accepted: send the JSON body as it is, uncompressed.',
  duplicateMember: 'body repeats a member name within one object; send each member once',
  missingHost: 'An HTTP/1.1 request must carry a Host header.',
  expectation: 'The only expectation the service meets is Expect: 100-continue.',
  bodyTooLarge: `The request body must be at most ${bodyLimitBytes / 1024} KiB.`,
  tooManyDisables: (limit: number) =>
    `Your network already has ${limit} agents being disabled. Repeat the request after the number of seconds in Retry-After.`,
} as const;

interface AjvError {
  keyword: string;
  instancePath: string;
  params: Record<string, unknown>;
  message?: string;
}

/** Turns the first Ajv error into a sentence a partner can act on, naming the route's own fields. */
function validationDetail(error: FastifyError, request: FastifyRequest): string {
  const first = (error.validation as AjvError[] | undefined)?.[0];
  if (!first) return error.message;
  const part = error.validationContext === 'params' ? 'path' : 'body';
  const field = first.instancePath.replace(/^\//, '').replaceAll('/', '.') || part;
  switch (first.keyword) {
    case 'required':
      return `${String(first.params.missingProperty)} is required`;
    case 'additionalProperties': {
      const schema = request.routeOptions.schema?.body as { properties?: Record<string, unknown> } | undefined;
      const allowed = Object.keys(schema?.properties ?? {});
      return `unknown property "${String(first.params.additionalProperty)}"; only ${allowed.join(' and ')} are accepted`;
    }
    case 'pattern':
    case 'format':
      return field === 'agentId' ? 'agentId must have the form us-east-1:<uuid> (lowercase hexadecimal)' : `${field} is malformed`;
    case 'type':
      return field === 'body' ? 'body must be a JSON object' : `${field} must be of type ${String(first.params.type)}`;
    default:
      return `${field} ${first.message ?? 'is invalid'}`;
  }
}

/** A problem for a domain error, or undefined when the error is not one of the domain's. */
function domainProblem(error: unknown, request: FastifyRequest, reply: FastifyReply): Problem | undefined {
  const id = request.id;
  if (error instanceof AgentNotInNetwork) return problem('notFound', partnerTexts.notInNetwork, id);
  if (error instanceof TooManyDisables) {
    reply.header('retry-after', '1');
    return problem('tooManyDisables', partnerTexts.tooManyDisables(error.limit), id);
  }
  if (error instanceof DisableSuperseded) {
    return problem('superseded', problemDetails.superseded, id, { pausedCampaignCount: error.pausedCampaignCount });
  }
  if (error instanceof DisableIncomplete) {
    const cause = error.runCause;
    request.log.error(
      {
        ...(cause.kind === 'dependency'
          ? cause.error.logFields
          : cause.kind === 'not_confirmed'
            ? { dependency: cause.dependency, reason: 'not_confirmed' }
            : cause.kind === 'agent_locked'
              ? { dependency: 'postgres', reason: 'agent_locked' }
              : { reason: cause.kind }),
        pausedCampaignCount: error.pausedCampaignCount,
        remainingCampaignCount: error.remainingCampaignCount,
      },
      'dependency failure',
    );
    const detail =
      cause.kind === 'deadline' || cause.kind === 'shutdown'
        ? problemDetails.deadline
        : cause.kind === 'agent_locked'
          ? problemDetails.recorded
          : problemDetails.pause;
    return problem('dependencyFailure', detail, id, {
      pausedCampaignCount: error.pausedCampaignCount,
      ...(error.remainingCampaignCount === undefined ? {} : { remainingCampaignCount: error.remainingCampaignCount }),
    });
  }
  if (error instanceof DependencyError) {
    request.log.error(error.logFields, 'dependency failure');
    return problem('dependencyFailure', problemDetails.database, id);
  }
  return undefined;
}

const frameworkProblems: Record<string, [ProblemKind, string]> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: ['unsupportedMediaType', partnerTexts.notJson],
  FST_ERR_CTP_BODY_TOO_LARGE: ['payloadTooLarge', partnerTexts.bodyTooLarge],
  FST_ERR_CTP_EMPTY_JSON_BODY: ['validation', 'body must be a JSON object'],
  FST_ERR_CTP_INVALID_JSON_BODY: ['validation', 'body is not valid JSON'],
  PAS_ERR_CHARSET: ['unsupportedMediaType', partnerTexts.notUtf8],
  PAS_ERR_CONTENT_ENCODING: ['unsupportedMediaType', partnerTexts.encoded],
  PAS_ERR_DUPLICATE_MEMBER: ['validation', partnerTexts.duplicateMember],
  FST_ERR_BAD_URL: ['validation', 'The request URL is malformed.'],
  FST_ERR_MAX_PARAM_LENGTH: ['validation', 'A path parameter is too long.'],
  FST_ERR_ASYNC_CONSTRAINT: ['validation', 'The request could not be routed.'],
};

/**
 * Maps every error to a problem. Fastify's own 4xx keep their status; dependency failures are
 * logged once here with their cause, and answered with a 500 that names no internals.
 */
export function errorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  const id = request.id;
  const domain = domainProblem(error, request, reply);
  if (domain) return sendProblem(reply, domain);
  // Details that quote the request (a member name) never quote a partner key.
  if (error.validation) return sendProblem(reply, problem('validation', redactKnownKeys(validationDetail(error, request)), id));
  const known = error.code ? frameworkProblems[error.code] : undefined;
  if (known) return sendProblem(reply, problem(known[0], known[1], id));
  const status = error.statusCode ?? 500;
  if (status >= 400 && status < 500) {
    return sendProblem(reply, { ...problem('validation', redactKnownKeys(error.message), id), status, title: 'Bad request' });
  }
  request.log.error({ err: { type: error.name, message: error.message, stack: error.stack } }, 'unhandled error');
  return sendProblem(reply, problem('internal', 'An unexpected error occurred.', id));
}
