import { describe, expect, it } from 'vitest';
import { isFault, outcomeOf } from '../../src/agents/outcomes.js';
import {
  AgentNotInNetwork,
  DisableIncomplete,
  DisableSuperseded,
  PreconditionFailed,
  TooManyDisables,
} from '../../src/agents/set-agent-status.js';
import { answerOf } from '../../src/http/answers.js';
import { DependencyError } from '../../src/observability/dependency-calls.js';
import { urls } from '../support/partner.js';

const agentId = 'us-east-1:00000000-0000-4000-8000-000000000001';
const inProgress = { agentId, networkId: 'n1', enabled: false, activeUnpausedCampaignCount: 5, disableInProgress: true };

describe('the answer catalogue', () => {
  const failures = [
    new AgentNotInNetwork(),
    new TooManyDisables(3),
    new DisableIncomplete(2, 5, { kind: 'deadline' }, inProgress),
    new PreconditionFailed(),
    new DisableSuperseded(1),
    new DependencyError('postgres', 'timeout', 'timeout'),
    new Error('bug'),
  ];

  it('gives each failure of the use case its outcome, its answer status and problem, and whether its span is an error', () => {
    const catalogue = failures.map((failure) => {
      const answer = answerOf({ error: failure }, '2026-11-21', 'req-1');
      return {
        name: failure.name,
        outcome: answer.outcome,
        status: answer.status,
        problem: answer.problem,
        fault: isFault(outcomeOf(failure)),
      };
    });
    expect(catalogue).toEqual([
      { name: 'AgentNotInNetwork', outcome: 'not_found', status: 404, problem: 'notFound', fault: false },
      { name: 'TooManyDisables', outcome: 'limited', status: 429, problem: 'tooManyDisables', fault: false },
      { name: 'DisableIncomplete', outcome: 'failed', status: 500, problem: 'dependencyFailure', fault: true },
      { name: 'PreconditionFailed', outcome: 'precondition_failed', status: 412, problem: 'preconditionFailed', fault: false },
      { name: 'DisableSuperseded', outcome: 'superseded', status: 409, problem: 'superseded', fault: true },
      { name: 'DependencyError', outcome: 'failed', status: 500, problem: 'dependencyFailure', fault: true },
      { name: 'Error', outcome: 'failed', status: 500, problem: 'internal', fault: true },
    ]);
  });

  it('answers the problem with its counts, headers and request id, and names nothing of an unknown error', () => {
    const incomplete = answerOf({ error: failures[2] }, '2026-11-21', 'req-1');
    expect(incomplete.body).toMatchObject({ status: 500, requestId: 'req-1', pausedCampaignCount: 2, remainingCampaignCount: 5 });
    expect(incomplete.log?.fields).toMatchObject({ reason: 'deadline', pausedCampaignCount: 2 });
    expect(answerOf({ error: new TooManyDisables(3) }, '2026-11-21', 'r').headers).toEqual({ 'retry-after': '1' });
    const bug = answerOf({ error: new Error('secret detail') }, '2026-11-21', 'r');
    expect(JSON.stringify(bug.body)).not.toContain('secret detail');
  });

  it('builds the 202 once: Prefer: respond-async, and an incomplete disable from 2026-12-01, answer the same status and Location', () => {
    const preferred = answerOf({ value: { accepted: inProgress } }, '2026-11-21', 'r');
    const incomplete = answerOf({ error: new DisableIncomplete(0, 5, { kind: 'deadline' }, inProgress) }, '2026-12-01', 'r');
    for (const answer of [preferred, incomplete]) {
      expect(answer).toMatchObject({ status: 202, body: inProgress, outcome: 'accepted' });
      expect(answer.headers.location).toBe(urls.agentStatus(agentId));
    }
    expect(preferred.headers['preference-applied']).toBe('respond-async');
    expect(incomplete.headers['preference-applied']).toBeUndefined();
    expect(incomplete.log?.message).toBe('dependency failure');
    const updated = { agentId, networkId: 'n1', enabled: true, pausedCampaignCount: 0 };
    expect(answerOf({ value: updated }, '2026-12-01', 'r')).toMatchObject({ status: 200, body: updated, outcome: 'updated' });
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
