import { describe, expect, it } from 'vitest';
import { isFault, outcomeOf } from '../../src/agents/outcomes.js';
import {
  AgentNotInNetwork,
  DisableIncomplete,
  DisableSuperseded,
  PreconditionFailed,
  TooManyDisables,
} from '../../src/agents/set-agent-status.js';
import { problemTypes } from '../../src/http/problems.js';
import { DependencyError } from '../../src/observability/dependency-calls.js';

describe('the outcome catalogue', () => {
  const failures = [
    new AgentNotInNetwork(),
    new TooManyDisables(3),
    new DisableIncomplete(2, 5, { kind: 'deadline' }),
    new PreconditionFailed(),
    new DisableSuperseded(1),
  ];

  it('gives each failure of the use case its outcome, its answer status, and whether its span is an error', () => {
    const catalogue = failures.map((failure) => ({
      name: failure.name,
      outcome: outcomeOf(failure),
      status: problemTypes[failure.problem].status,
      fault: isFault(outcomeOf(failure)),
    }));
    expect(catalogue).toEqual([
      { name: 'AgentNotInNetwork', outcome: 'not_found', status: 404, fault: false },
      { name: 'TooManyDisables', outcome: 'limited', status: 429, fault: false },
      { name: 'DisableIncomplete', outcome: 'failed', status: 500, fault: true },
      { name: 'PreconditionFailed', outcome: 'precondition_failed', status: 412, fault: false },
      { name: 'DisableSuperseded', outcome: 'superseded', status: 409, fault: true },
    ]);
  });

  it('counts any other error (a dependency, a bug) as failed, a fault', () => {
    for (const error of [new DependencyError('postgres', 'timeout', 'timeout'), new Error('bug'), 'thrown string']) {
      expect(outcomeOf(error)).toBe('failed');
    }
    expect(isFault('failed')).toBe(true);
    expect(isFault('updated')).toBe(false);
    expect(isFault('accepted')).toBe(false);
  });
});
