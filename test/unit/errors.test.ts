import { describe, expect, it } from 'vitest';
import { problem, problemTypes } from '../../src/errors.js';

describe('problem details (RFC 9457)', () => {
  it('builds each kind with a stable type URN, its title and status', () => {
    expect(problem('notFound', 'No agent.', 'r1')).toEqual({
      type: 'urn:partner-agent-status:problem:not-found', title: 'Not found', status: 404, detail: 'No agent.', requestId: 'r1',
    });
    expect(problem('dependencyFailure', 'x', 'r2').type).toBe('urn:partner-agent-status:problem:dependency-failure');
    const statuses = Object.fromEntries(Object.entries(problemTypes).map(([kind, { status }]) => [kind, status]));
    expect(statuses).toEqual({
      validation: 400, unauthorized: 401, notFound: 404, payloadTooLarge: 413, unsupportedMediaType: 415,
      dependencyFailure: 500, internal: 500, unavailable: 503,
    });
  });
});
