import { describe, expect, it } from 'vitest';
import { problem, problemTypes } from '../../src/http/problems.js';
import { DependencyError, sqlstateFields } from '../../src/observability/dependency-calls.js';

describe('problem details (RFC 9457)', () => {
  it('builds each kind with a stable type URN, its title and status', () => {
    expect(problem('notFound', 'No agent.', 'r1')).toEqual({
      type: 'urn:partner-agent-status:problem:not-found',
      title: 'Not found',
      status: 404,
      detail: 'No agent.',
      requestId: 'r1',
    });
    const statuses = Object.fromEntries(Object.entries(problemTypes).map(([kind, { status }]) => [kind, status]));
    expect(statuses).toEqual({
      validation: 400,
      unsupportedApiVersion: 400,
      unauthorized: 401,
      notFound: 404,
      methodNotAllowed: 405,
      superseded: 409,
      idempotencyKeyInUse: 409,
      webhookEndpointLimit: 409,
      eventsGone: 410,
      preconditionFailed: 412,
      idempotencyKeyReused: 422,
      payloadTooLarge: 413,
      unsupportedMediaType: 415,
      expectationFailed: 417,
      rateLimited: 429,
      tooManyDisables: 429,
      idempotencyKeyQuota: 429,
      webhookLookupsBusy: 429,
      tooManyStreams: 429,
      dependencyFailure: 500,
      internal: 500,
      unavailable: 503,
    });
  });

  it('uses the type URNs partners match on (docs/interfaces.md §3 and the README)', () => {
    const types = Object.fromEntries(Object.keys(problemTypes).map((kind) => [kind, problem(kind as never, 'x', 'r').type]));
    expect(types).toMatchObject({
      methodNotAllowed: 'urn:partner-agent-status:problem:method-not-allowed',
      expectationFailed: 'urn:partner-agent-status:problem:expectation-failed',
      superseded: 'urn:partner-agent-status:problem:superseded',
      rateLimited: 'urn:partner-agent-status:problem:rate-limited',
      tooManyDisables: 'urn:partner-agent-status:problem:too-many-disables',
      tooManyStreams: 'urn:partner-agent-status:problem:too-many-streams',
      eventsGone: 'urn:partner-agent-status:problem:events-gone',
      idempotencyKeyQuota: 'urn:partner-agent-status:problem:idempotency-key-quota',
      dependencyFailure: 'urn:partner-agent-status:problem:dependency-failure',
      unavailable: 'urn:partner-agent-status:problem:unavailable',
      idempotencyKeyInUse: 'urn:partner-agent-status:problem:idempotency-key-in-use',
      preconditionFailed: 'urn:partner-agent-status:problem:precondition-failed',
      idempotencyKeyReused: 'urn:partner-agent-status:problem:idempotency-key-reused',
      webhookEndpointLimit: 'urn:partner-agent-status:problem:webhook-endpoint-limit',
      webhookLookupsBusy: 'urn:partner-agent-status:problem:webhook-lookups-busy',
    });
  });

  it('carries how far a disable got as extension members, and nothing when there are none', () => {
    expect(problem('dependencyFailure', 'x', 'r3', { pausedCampaignCount: 100, remainingCampaignCount: 50 })).toEqual({
      type: 'urn:partner-agent-status:problem:dependency-failure',
      title: 'Dependency failure',
      status: 500,
      detail: 'x',
      requestId: 'r3',
      pausedCampaignCount: 100,
      remainingCampaignCount: 50,
    });
    expect(Object.keys(problem('superseded', 'x', 'r4', { pausedCampaignCount: 0 }))).toEqual([
      'type',
      'title',
      'status',
      'detail',
      'requestId',
      'pausedCampaignCount',
    ]);
    expect(Object.keys(problem('validation', 'x', 'r5'))).toEqual(['type', 'title', 'status', 'detail', 'requestId']);
  });
});

describe('a PostgreSQL failure in the log', () => {
  it('carries its SQLSTATE and the condition name of its class, never a server message', () => {
    const failure = new DependencyError('postgres', 'error', 'check_claim: DatabaseError', undefined, '26000');
    expect(failure.logFields).toEqual({
      dependency: 'postgres',
      reason: 'error',
      cause: 'postgres error: check_claim: DatabaseError (SQLSTATE 26000 invalid_sql_statement_name)',
      sqlstate: '26000',
      sqlstateClass: 'invalid_sql_statement_name',
    });
    expect(sqlstateFields(new DependencyError('postgres', 'busy', 'x', undefined, '55P03'))).toEqual({
      sqlstate: '55P03',
      sqlstateClass: 'object_not_in_prerequisite_state',
    });
    expect(sqlstateFields(new DependencyError('postgres', 'unavailable', 'x', undefined, 'P0001'))).toMatchObject({
      sqlstateClass: 'plpgsql_error',
    });
    // No SQLSTATE (a socket's error, another dependency): no fields.
    expect(new DependencyError('redis', 'timeout', 'x').logFields).toEqual({
      dependency: 'redis',
      reason: 'timeout',
      cause: 'redis timeout: x',
    });
    expect(sqlstateFields(new Error('ECONNRESET'))).toEqual({});
  });
});
