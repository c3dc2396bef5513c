/**
 * The outcomes of a status change, named once. Each failure of the use case carries its outcome;
 * the use case's span reads it from the error, never from its name, and the answer catalogue
 * (src/http/answers.ts) gives each failure its status, body and problem. A run's own end (the
 * worker's outcome) is classified where runs end, in disable-runs.ts.
 */

/** What became of a status change request: the audit line's `outcome`, the metrics' label. */
export type ChangeOutcome = 'updated' | 'accepted' | 'not_found' | 'limited' | 'precondition_failed' | 'superseded' | 'key_lost' | 'failed';

/** A failure the use case names: the outcome it stands for (its answer is the catalogue's). */
export abstract class ChangeFailure extends Error {
  abstract readonly outcome: ChangeOutcome;
}

/**
 * Outcomes that are answers to what the partner asked (an agent of another network, a limit, a
 * stale tag), not faults of the service: the span does not count them as errors.
 */
const answers: ReadonlySet<ChangeOutcome> = new Set(['updated', 'accepted', 'not_found', 'limited', 'precondition_failed']);

/** The outcome of a request that threw `error`: a failure's own, else `failed` (a dependency, or a bug). */
export function outcomeOf(error: unknown): ChangeOutcome {
  return error instanceof ChangeFailure ? error.outcome : 'failed';
}

/** Whether an outcome is a fault of the service (its span is marked as an error). */
export function isFault(outcome: ChangeOutcome): boolean {
  return !answers.has(outcome);
}
