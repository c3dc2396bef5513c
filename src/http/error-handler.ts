import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { ChangeFailure } from '../agents/outcomes.js';
import {
  AgentNotInNetwork,
  DisableIncomplete,
  DisableSuperseded,
  IdempotencyKeyLost,
  PreconditionFailed,
  TooManyDisables,
} from '../agents/set-agent-status.js';
import { DependencyError } from '../observability/dependency-calls.js';
import { redactKnownKeys } from '../observability/key-finder.js';
import { PoolWaitExceeded } from '../stores/pool-wait.js';
import { convenienceTexts, type Problem, type ProblemKind, partnerTexts, problem, problemDetails, sendProblem } from './problems.js';

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
      return field === 'body' ? partnerTexts.notObject : `${field} must be of type ${String(first.params.type)}`;
    default:
      return `${field} ${first.message ?? 'is invalid'}`;
  }
}

/** The one log line of a disable that did not finish by its answer, whatever the answer (500, or 202 in later API versions). */
export function logIncompleteDisable(request: FastifyRequest, error: DisableIncomplete): void {
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
}

/** What the 500 of an incomplete disable says, by why its run stopped. */
function incompleteDetail(error: DisableIncomplete): string {
  const cause = error.runCause;
  // Not "the agent is disabled" while its flag is not known committed.
  if (cause.kind === 'agent_locked' || !error.flagged) return problemDetails.recorded;
  if (cause.kind === 'deadline' || cause.kind === 'shutdown') return problemDetails.deadline;
  return problemDetails.pause;
}

/**
 * The problem a failure of the use case is answered with: its kind is the failure's own
 * (src/agents/outcomes.ts), its texts and the counts it adds are chosen here.
 */
export function failureProblem(error: ChangeFailure, request: FastifyRequest, reply: FastifyReply): Problem {
  const id = request.id;
  if (error instanceof AgentNotInNetwork) return problem(error.problem, partnerTexts.notInNetwork, id);
  if (error instanceof PreconditionFailed) return problem(error.problem, convenienceTexts.preconditionFailed, id);
  if (error instanceof IdempotencyKeyLost) {
    reply.header('retry-after', '1');
    return problem(error.problem, convenienceTexts.keyLost, id);
  }
  if (error instanceof TooManyDisables) {
    reply.header('retry-after', '1');
    return problem(error.problem, partnerTexts.tooManyDisables(error.limit), id);
  }
  if (error instanceof DisableSuperseded) {
    return problem(error.problem, problemDetails.superseded, id, { pausedCampaignCount: error.pausedCampaignCount });
  }
  if (error instanceof DisableIncomplete) {
    logIncompleteDisable(request, error);
    return problem(error.problem, incompleteDetail(error), id, {
      pausedCampaignCount: error.pausedCampaignCount,
      ...(error.remainingCampaignCount === undefined ? {} : { remainingCampaignCount: error.remainingCampaignCount }),
    });
  }
  return problem(error.problem, problemDetails.unexpected, id);
}

const frameworkProblems: Record<string, [ProblemKind, string]> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: ['unsupportedMediaType', partnerTexts.notJson],
  FST_ERR_CTP_BODY_TOO_LARGE: ['payloadTooLarge', partnerTexts.bodyTooLarge],
  FST_ERR_CTP_EMPTY_JSON_BODY: ['validation', partnerTexts.notObject],
  FST_ERR_CTP_INVALID_JSON_BODY: ['validation', partnerTexts.invalidJson],
  PAS_ERR_CHARSET: ['unsupportedMediaType', partnerTexts.notUtf8],
  PAS_ERR_CONTENT_ENCODING: ['unsupportedMediaType', partnerTexts.encoded],
  PAS_ERR_DUPLICATE_MEMBER: ['validation', partnerTexts.duplicateMember],
  FST_ERR_BAD_URL: ['validation', partnerTexts.badUrl],
  FST_ERR_MAX_PARAM_LENGTH: ['validation', partnerTexts.longParameter],
  FST_ERR_ASYNC_CONSTRAINT: ['validation', partnerTexts.notRouted],
};

/**
 * Maps every error to a problem. Fastify's own 4xx keep their status; dependency failures are
 * logged once here with their cause, and answered with a 500 that names no internals.
 */
export function errorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  const id = request.id;
  if (error instanceof ChangeFailure) return sendProblem(reply, failureProblem(error, request, reply));
  if (error instanceof PoolWaitExceeded) {
    // Every connection busy for as long as the request could wait: nothing was sent, so nothing changed.
    request.log.error(error.logFields, 'dependency failure');
    reply.header('retry-after', '1');
    return sendProblem(reply, problem('unavailable', problemDetails.poolFull, id));
  }
  if (error instanceof DependencyError) {
    request.log.error(error.logFields, 'dependency failure');
    return sendProblem(reply, problem('dependencyFailure', problemDetails.database, id));
  }
  // Details that quote the request (a member name) never quote a partner key.
  if (error.validation) return sendProblem(reply, problem('validation', redactKnownKeys(validationDetail(error, request)), id));
  const known = error.code ? frameworkProblems[error.code] : undefined;
  if (known) return sendProblem(reply, problem(known[0], known[1], id));
  const status = error.statusCode ?? 500;
  if (status >= 400 && status < 500) {
    return sendProblem(reply, { ...problem('validation', redactKnownKeys(error.message), id), status, title: 'Bad request' });
  }
  request.log.error({ err: { type: error.name, message: error.message, stack: error.stack } }, 'unhandled error');
  return sendProblem(reply, problem('internal', problemDetails.unexpected, id));
}
