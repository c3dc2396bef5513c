// The answer catalogue: what every result and failure of a status change is answered with, in one
// table. The single route, the error handler, the audit line and each item of a bulk change read it
// here; a new failure of the use case is one row of `failureRows` (and its class), nothing else.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ChangeOutcome } from '../agents/outcomes.js';
import {
  type AcceptedDisable,
  AgentNotInNetwork,
  type AgentStatus,
  DisableIncomplete,
  DisableSuperseded,
  IdempotencyKeyLost,
  PreconditionFailed,
  TooManyDisables,
} from '../agents/set-agent-status.js';
import { type ApiVersion, versionMakes } from '../api-versions.js';
import { DependencyError } from '../observability/dependency-calls.js';
import type { AgentStatusView } from '../stores/agent-repository.js';
import { PoolWaitExceeded } from '../stores/pool-wait.js';
import { agentStatusUrl } from './paths.js';
import { convenienceTexts, type Problem, type ProblemKind, partnerTexts, problem, problemDetails, sendProblem } from './problems.js';

/**
 * Every outcome an access line can carry (its `outcome` field): a closed set, so a new one is added
 * here and nowhere can a route invent its own spelling.
 */
export type AuditOutcome =
  | ChangeOutcome
  | 'read'
  | 'replayed'
  | 'key_in_use'
  | 'key_reused'
  | 'unauthenticated_shed'
  | 'unsupported_api_version'
  | 'client_gone'
  | 'webhook_endpoint_created'
  | 'webhook_endpoint_deleted'
  | 'webhook_endpoint_enabled'
  | 'stream'
  | 'webhook_secret_rotated'
  | 'webhook_delivery_retried';

/** What a status change came to: the use case's value, or what it threw. */
export type ChangeResult = { value: AgentStatus | AcceptedDisable } | { error: unknown };

/** How an answer is counted in the metrics, besides the access line. */
export interface AnswerCounts {
  /** agent_status_changes_total counts it, with the answer's outcome. */
  change: boolean;
  /** The convenience answer it is (convenience_answers_total), if any. */
  convenience?: 'accepted' | 'precondition_failed';
  /** The limit that refused it (requests_limited_total), if any. */
  limit?: 'disables_in_flight';
}

/** One answer: its status, headers and body, the outcome it is audited as, how it counts and what it logs. */
export interface Answer {
  status: number;
  headers: Readonly<Record<string, string>>;
  body: AgentStatus | AgentStatusView | Problem;
  /** The problem's kind when the body is a problem. */
  problem?: ProblemKind;
  outcome: ChangeOutcome;
  counts: AnswerCounts;
  /** The one error line the answer is logged with (a dependency failure, an incomplete disable, a bug). */
  log?: { fields: Record<string, unknown>; message: string };
}

/** A problem answer of `kind`. */
function problemAnswer(
  kind: ProblemKind,
  detail: string,
  requestId: string,
  rest: Pick<Answer, 'outcome' | 'counts'> & Partial<Pick<Answer, 'headers' | 'log'>> & { extension?: Parameters<typeof problem>[3] },
): Answer {
  const body = problem(kind, detail, requestId, rest.extension);
  return {
    status: body.status,
    headers: rest.headers ?? {},
    body,
    problem: kind,
    outcome: rest.outcome,
    counts: rest.counts,
    log: rest.log,
  };
}

/** The one log line of a disable that did not finish by its answer, whatever the answer (500, or 202 from 2026-12-01). */
function incompleteLog(error: DisableIncomplete): Answer['log'] {
  const cause = error.runCause;
  const why =
    cause.kind === 'dependency'
      ? cause.error.logFields
      : cause.kind === 'not_confirmed'
        ? { dependency: cause.dependency, reason: 'not_confirmed' }
        : cause.kind === 'agent_locked'
          ? { dependency: 'postgres', reason: 'agent_locked' }
          : { reason: cause.kind };
  const fields = { ...why, pausedCampaignCount: error.pausedCampaignCount, remainingCampaignCount: error.remainingCampaignCount };
  return { fields, message: 'dependency failure' };
}

/** What the 500 of an incomplete disable says, by why its run stopped. */
function incompleteDetail(error: DisableIncomplete): string {
  const cause = error.runCause;
  // Not "the agent is disabled" while its flag is not known committed (its status still enabled).
  if (cause.kind === 'agent_locked' || error.status.enabled) return problemDetails.recorded;
  if (cause.kind === 'deadline' || cause.kind === 'shutdown') return problemDetails.deadline;
  return problemDetails.pause;
}

/** A 202: the disable is recorded and goes on by itself; Location is where its progress is read. */
function acceptedAnswer(status: AgentStatusView, headers: Record<string, string>, log?: Answer['log']): Answer {
  const counts: AnswerCounts = { change: true, ...('preference-applied' in headers ? { convenience: 'accepted' as const } : {}) };
  return { status: 202, headers: { location: agentStatusUrl(status.agentId), ...headers }, body: status, outcome: 'accepted', counts, log };
}

/** One row of the catalogue: the failures of one class, and what they are answered with. */
interface FailureRow {
  matches(error: unknown): boolean;
  answer(error: unknown, version: ApiVersion, requestId: string): Answer;
}

function row<E>(
  kind: abstract new (...args: never[]) => E,
  answer: (error: E, version: ApiVersion, requestId: string) => Answer,
): FailureRow {
  return { matches: (error) => error instanceof kind, answer: (error, version, id) => answer(error as E, version, id) };
}

/** The failures of a status change, one row each: the problem (or the 202) it is answered with. */
const failureRows: readonly FailureRow[] = [
  row(AgentNotInNetwork, (_error, _version, id) =>
    problemAnswer('notFound', partnerTexts.notInNetwork, id, { outcome: 'not_found', counts: { change: true } }),
  ),
  row(PreconditionFailed, (_error, _version, id) =>
    problemAnswer('preconditionFailed', convenienceTexts.preconditionFailed, id, {
      outcome: 'precondition_failed',
      counts: { change: false, convenience: 'precondition_failed' },
    }),
  ),
  row(TooManyDisables, (error, _version, id) =>
    problemAnswer('tooManyDisables', partnerTexts.tooManyDisables(error.limit), id, {
      outcome: 'limited',
      counts: { change: false, limit: 'disables_in_flight' },
      headers: { 'retry-after': '1' },
    }),
  ),
  row(DisableSuperseded, (error, _version, id) =>
    problemAnswer('superseded', problemDetails.superseded, id, {
      outcome: 'superseded',
      counts: { change: true },
      extension: { pausedCampaignCount: error.pausedCampaignCount },
    }),
  ),
  row(DisableIncomplete, (error, version, id) =>
    // From 2026-12-01 the recorded disable that finishes by itself is a 202 with its status, once
    // its flag is known committed; before that (the agent's row held by another transaction, the
    // connection lost while waiting for it) it is the 500 of 2026-11-21, which says it is recorded.
    versionMakes(version, 'incompleteDisableAccepted') && !error.status.enabled
      ? acceptedAnswer(error.status, {}, incompleteLog(error))
      : problemAnswer('dependencyFailure', incompleteDetail(error), id, {
          outcome: 'failed',
          counts: { change: true },
          log: incompleteLog(error),
          extension: {
            pausedCampaignCount: error.pausedCampaignCount,
            ...(error.remainingCampaignCount === undefined ? {} : { remainingCampaignCount: error.remainingCampaignCount }),
          },
        }),
  ),
  row(IdempotencyKeyLost, (_error, _version, id) =>
    problemAnswer('idempotencyKeyInUse', convenienceTexts.keyLost, id, {
      outcome: 'key_lost',
      counts: { change: false },
      headers: { 'retry-after': '1' },
    }),
  ),
  // Before DependencyError, of which it is one: every connection busy for as long as the request
  // could wait, so no statement was sent and nothing changed.
  row(PoolWaitExceeded, (error, _version, id) =>
    problemAnswer('unavailable', problemDetails.poolFull, id, {
      outcome: 'failed',
      counts: { change: false },
      headers: { 'retry-after': '1' },
      log: { fields: error.logFields, message: 'dependency failure' },
    }),
  ),
  row(DependencyError, (error, _version, id) =>
    problemAnswer('dependencyFailure', problemDetails.database, id, {
      outcome: 'failed',
      counts: { change: true },
      log: { fields: error.logFields, message: 'dependency failure' },
    }),
  ),
];

/** Whether `error` is a failure the catalogue answers (the error handler asks before it answers one). */
export function isCatalogued(error: unknown): boolean {
  return failureRows.some((failure) => failure.matches(error));
}

/**
 * The answer to a status change's result in API version `version`: a 200 with the status, a 202
 * (Prefer: respond-async, or an incomplete disable from 2026-12-01), or the failure's problem. An
 * error the catalogue does not know (a bug) is a 500 that names nothing of it.
 */
export function answerOf(result: ChangeResult, version: ApiVersion, requestId: string): Answer {
  if ('value' in result) {
    const { value } = result;
    if ('accepted' in value) return acceptedAnswer(value.accepted, { 'preference-applied': 'respond-async' });
    return { status: 200, headers: {}, body: value, outcome: 'updated', counts: { change: true } };
  }
  const { error } = result;
  const failure = failureRows.find((candidate) => candidate.matches(error));
  if (failure) return failure.answer(error, version, requestId);
  const err = error as Error;
  return problemAnswer('internal', problemDetails.unexpected, requestId, {
    outcome: 'failed',
    counts: { change: true },
    log: { fields: { err: { type: err?.name, message: err?.message, stack: err?.stack } }, message: 'unhandled error' },
  });
}

/**
 * Sends `answer` as the request's answer: its audit outcome and log line, its headers, its status
 * and body (problem+json for a problem).
 */
export function sendAnswer(request: FastifyRequest, reply: FastifyReply, answer: Answer): FastifyReply {
  request.audit.outcome = answer.outcome;
  if (answer.log) request.log.error(answer.log.fields, answer.log.message);
  reply.headers(answer.headers);
  if (answer.problem) return sendProblem(reply, answer.body as Problem);
  return reply.code(answer.status).send(answer.body);
}
