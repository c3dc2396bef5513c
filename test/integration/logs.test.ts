import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { injectStatusBody, statusPath } from '../support/partner.js';
import { startTestService, type TestService } from '../support/service.js';

const db = testDatabase();
let svc: TestService;
let networkId: string;
const key = newApiKey();

beforeAll(async () => {
  networkId = await db.network();
  svc = await startTestService({
    partners: [{ key, networkId, name: 'logged-partner' }],
    env: { SPEND_MANAGEMENT_TOKEN: 'sm-token-never-logged-123' },
  });
});

afterAll(async () => {
  await svc?.close();
  await db.close();
});

const send = (apiKey: string | undefined, body: unknown, extra: Record<string, string> = {}) =>
  injectStatusBody(svc.app, apiKey, body, extra);

describe('logs: one line per request, and never a key', () => {
  it('writes one line per request with request id, partner, agent, outcome and duration', async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 2);
    const response = await send(key, { agentId, enabled: false }, { 'x-request-id': 'log-line-1' });
    const lines = svc.logs.records().filter((r) => r.requestId === 'log-line-1');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      msg: 'request completed',
      route: statusPath,
      statusCode: 200,
      partner: 'logged-partner',
      agentId,
      enabled: false,
      outcome: 'updated',
      level: 'info',
    });
    expect(typeof lines[0]!.durationMs).toBe('number');
    expect(response.statusCode).toBe(200);
  });

  it('logs a dependency failure once, with its cause', async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 1);
    svc.sim.setMode('fail', { failStatus: 503 });
    try {
      await send(key, { agentId, enabled: false }, { 'x-request-id': 'log-line-2' });
    } finally {
      svc.sim.setMode('ok');
    }
    const lines = svc.logs.records().filter((r) => r.requestId === 'log-line-2');
    const failures = lines.filter((r) => r.msg === 'dependency failure');
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatchObject({
      dependency: 'spend_management',
      reason: 'bad_response',
      cause: expect.stringContaining('HTTP 503'),
    });
    expect(lines.find((r) => r.msg === 'request completed')).toMatchObject({ statusCode: 500, outcome: 'failed' });
  });

  it('never writes a partner key, valid or not, nor the spend-management token', async () => {
    const strangers = Array.from({ length: 5 }, () => newApiKey());
    const agentId = await db.agent(networkId);
    const suppressed = async () =>
      (await svc.service.metrics.logLinesSuppressed.get()).values.find((v) => v.labels.reason === 'auth_failure')?.value ?? 0;
    const linesBefore = svc.logs.lines.length;
    const suppressedBefore = await suppressed();
    for (const apiKey of [key, ...strangers]) {
      await send(apiKey, { agentId, enabled: true });
      await send(apiKey, { agentId, enabled: 'nope' });
      await send(apiKey, { agentId: `us-east-1:${crypto.randomUUID()}`, enabled: false });
    }
    await send(undefined, { agentId, enabled: true }, { authorization: `Bearer ${key}` });
    await db.campaigns(agentId, 1);
    svc.sim.setMode('fail');
    try {
      expect((await send(key, { agentId, enabled: false })).statusCode).toBe(500);
    } finally {
      svc.sim.setMode('ok');
    }

    // 20 requests: each has its line, except the 401s beyond one a second, which are counted instead.
    const written = svc.logs
      .records()
      .slice(linesBefore)
      .filter((r) => r.msg === 'request completed').length;
    expect(written + (await suppressed()) - suppressedBefore).toBe(20);
    const everything = svc.logs.lines.join('\n');
    for (const apiKey of [key, ...strangers]) expect(everything).not.toContain(apiKey);
    expect(everything).not.toContain('sm-token-never-logged-123');
    const metrics = await svc.service.metrics.registry.metrics();
    for (const apiKey of [key, ...strangers]) expect(metrics).not.toContain(apiKey);
  });
});
