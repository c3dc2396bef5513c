import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { redactKnownKeys } from '../observability/key-finder.js';
import { answerOf, isCatalogued, sendAnswer } from './answers.js';
import { versionOf } from './api-version-hooks.js';
import { type ProblemKind, partnerTexts, problem, problemDetails, sendProblem } from './problems.js';

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
  // A failure of the use case (or a dependency's) a route let through: the catalogue's answer.
  if (isCatalogued(error)) return sendAnswer(request, reply, answerOf({ error }, versionOf(request), id));
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
