import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { AgentNotInNetwork } from './agents/set-agent-status.js';
import { DependencyError } from './stores/dependency-error.js';

/**
 * RFC 9457 problem details. Every error the service answers is one of these types; `type` is a
 * stable URN partners can match on, `detail` says what to fix, `requestId` ties it to our logs.
 */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  requestId: string;
}

export const problemTypes = {
  validation: { status: 400, title: 'Invalid request body' },
  unauthorized: { status: 401, title: 'Missing or unknown API key' },
  notFound: { status: 404, title: 'Not found' },
  payloadTooLarge: { status: 413, title: 'Request body too large' },
  unsupportedMediaType: { status: 415, title: 'Unsupported media type' },
  dependencyFailure: { status: 500, title: 'Dependency failure' },
  internal: { status: 500, title: 'Internal error' },
  unavailable: { status: 503, title: 'Service unavailable' },
} as const;

export type ProblemKind = keyof typeof problemTypes;

const typeUri = (kind: ProblemKind) =>
  `urn:partner-agent-status:problem:${kind.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;

export function problem(kind: ProblemKind, detail: string, requestId: string): Problem {
  const { status, title } = problemTypes[kind];
  return { type: typeUri(kind), title, status, detail, requestId };
}

export function sendProblem(reply: FastifyReply, body: Problem): FastifyReply {
  return reply.code(body.status).type('application/problem+json').send(body);
}

/** What a 500 says, by where it happened; both stay true whatever the request was. */
export const dependencyFailureDetails = {
  // Spend management and Redis are only called by a disable, after the agent is disabled.
  pause: 'A system holding campaign state did not confirm the pause. The agent is disabled; repeat the request to finish pausing its campaigns.',
  database: 'The database did not answer; the change may not have been made. Repeat the request: it is always safe to repeat.',
} as const;

/** Raised by the auth hook; carries no trace of the key that was presented. */
export class Unauthorized extends Error {
  override readonly name = 'Unauthorized';
  constructor(readonly reason: 'missing' | 'unknown') {
    super(reason === 'missing' ? 'x-api-key header is required' : 'API key is not valid');
  }
}

interface AjvError {
  keyword: string;
  instancePath: string;
  params: Record<string, unknown>;
  message?: string;
}

/** Turns the first Ajv error into a sentence a partner can act on. */
function validationDetail(error: FastifyError): string {
  const first = (error.validation as AjvError[] | undefined)?.[0];
  if (!first) return error.message;
  const field = first.instancePath.replace(/^\//, '').replaceAll('/', '.') || 'body';
  switch (first.keyword) {
    case 'required':
      return `${String(first.params.missingProperty)} is required`;
    case 'additionalProperties':
      return `unknown property "${String(first.params.additionalProperty)}"; only agentId and enabled are accepted`;
    case 'pattern':
    case 'format':
      return field === 'agentId' ? 'agentId must have the form us-east-1:<uuid> (lowercase hexadecimal)' : `${field} is malformed`;
    case 'type':
      return field === 'body' ? 'body must be a JSON object' : `${field} must be of type ${String(first.params.type)}`;
    default:
      return `${field} ${first.message ?? 'is invalid'}`;
  }
}

/**
 * Maps every error to a problem. Fastify's own 4xx keep their status; dependency failures are
 * logged once here with their cause, and answered with a generic 500 that names no internals.
 */
export function errorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  const id = request.id;
  if (error instanceof Unauthorized) return sendProblem(reply, problem('unauthorized', error.message, id));
  if (error instanceof AgentNotInNetwork) {
    return sendProblem(reply, problem('notFound', 'No agent with this agentId exists in your network.', id));
  }
  if (error instanceof DependencyError) {
    request.log.error({ dependency: error.dependency, reason: error.reason, cause: error.message }, 'dependency failure');
    const detail = error.dependency === 'postgres' ? dependencyFailureDetails.database : dependencyFailureDetails.pause;
    return sendProblem(reply, problem('dependencyFailure', detail, id));
  }
  if (error.validation) return sendProblem(reply, problem('validation', validationDetail(error), id));
  switch (error.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return sendProblem(reply, problem('unsupportedMediaType', 'Content-Type must be application/json.', id));
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return sendProblem(reply, problem('payloadTooLarge', 'The request body must be at most 16 KiB.', id));
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return sendProblem(reply, problem('validation', 'body must be a JSON object', id));
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return sendProblem(reply, problem('validation', 'body is not valid JSON', id));
  }
  const status = error.statusCode ?? 500;
  if (status >= 400 && status < 500) {
    return sendProblem(reply, { ...problem('validation', error.message, id), status, title: 'Bad request' });
  }
  request.log.error({ err: { type: error.name, message: error.message, stack: error.stack } }, 'unhandled error');
  return sendProblem(reply, problem('internal', 'An unexpected error occurred.', id));
}
