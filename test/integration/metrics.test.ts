import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { injectStatusBody } from '../support/partner.js';
import { startTestService, type TestService } from '../support/service.js';

const db = testDatabase();
const key = newApiKey();
const strangerKey = newApiKey();
let networkId: string;
let svc: TestService;
let scrape: () => Promise<string>;
let startedAt: number;

beforeAll(async () => {
  startedAt = Date.now() / 1000;
  networkId = await db.network();
  svc = await startTestService({
    partners: [{ key, networkId, name: 'metered' }],
    // The convergence worker stays out of the way (its first poll is a minute away), so every
    // spend-management call counted below is one a request made.
    env: { BREAKER_VOLUME_THRESHOLD: '2', BREAKER_RESET_TIMEOUT_MS: '60000', WORKER_POLL_INTERVAL_MS: '60000' },
  });
  await svc.service.metricsServer.listen({ port: 0, host: '127.0.0.1' });
  const { port } = svc.service.metricsServer.server.address() as { port: number };
  scrape = async () => {
    const response = await fetch(`http://127.0.0.1:${port}/metrics`);
    expect(response.headers.get('content-type')).toMatch(/^text\/plain/);
    return response.text();
  };
});

afterAll(async () => {
  await svc?.close();
  await db.close();
});

const send = (apiKey: string | undefined, body: unknown) => injectStatusBody(svc.app, apiKey, body);

/** The value of one sample, by metric name and exact label set (as exposed). */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('metrics after a scripted mix of requests', () => {
  it('counts each outcome, paused campaigns, 401s, dependency calls and the breaker opening; no key appears', async () => {
    const agentId = await db.agent(networkId);
    await db.campaigns(agentId, 3);
    const foreign = await db.agent(await db.network());

    expect((await send(key, { agentId, enabled: true })).statusCode).toBe(200);
    expect((await send(key, { agentId, enabled: 'yes' })).statusCode).toBe(400);
    expect((await send(undefined, { agentId, enabled: true })).statusCode).toBe(401);
    expect((await send(strangerKey, { agentId, enabled: true })).statusCode).toBe(401);
    expect((await send(key, { agentId: foreign, enabled: false })).statusCode).toBe(404);
    svc.sim.setMode('fail');
    try {
      expect((await send(key, { agentId, enabled: false })).statusCode).toBe(500);
      expect((await send(key, { agentId, enabled: false })).statusCode).toBe(500);
      expect((await send(key, { agentId, enabled: false })).statusCode).toBe(500); // rejected by the open breaker
    } finally {
      svc.sim.setMode('ok');
    }

    const scrapedFrom = Date.now() / 1000;
    const text = await scrape();
    const scrapedTo = Date.now() / 1000;
    const route = 'route="/partner/agents/status"';
    for (const [status, count] of [
      ['200', 1],
      ['400', 1],
      ['401', 2],
      ['404', 1],
      ['500', 3],
    ] as const) {
      expect(sample(text, `http_request_duration_seconds_count{method="POST",${route},status_code="${status}"}`), status).toBe(count);
    }
    // Every observation lands in the +Inf bucket and, being far under 5 s, in the 5 s bucket too.
    for (const le of ['5', '+Inf']) {
      expect(sample(text, `http_request_duration_seconds_bucket{le="${le}",method="POST",${route},status_code="401"}`)).toBe(2);
    }
    expect(sample(text, 'agent_status_changes_total{partner="metered",enabled="true",outcome="updated"}')).toBe(1);
    expect(sample(text, 'agent_status_changes_total{partner="metered",enabled="false",outcome="not_found"}')).toBe(1);
    expect(sample(text, 'agent_status_changes_total{partner="metered",enabled="false",outcome="failed"}')).toBe(3);
    expect(sample(text, 'auth_failures_total{reason="missing"}')).toBe(1);
    expect(sample(text, 'auth_failures_total{reason="unknown"}')).toBe(1);
    expect(sample(text, 'circuit_breaker_state{breaker="spend_management"}')).toBe(2);
    expect(sample(text, 'circuit_breaker_state{breaker="redis"}')).toBe(0);
    expect(sample(text, 'circuit_breaker_events_total{breaker="spend_management",event="open"}')).toBe(1);
    expect(sample(text, 'circuit_breaker_events_total{breaker="spend_management",event="reject"}')).toBe(1);
    expect(
      sample(
        text,
        'dependency_request_duration_seconds_count{dependency="spend_management",operation="pause_spending_periods",outcome="error"}',
      ),
    ).toBe(2);
    expect(
      sample(
        text,
        'dependency_request_duration_seconds_count{dependency="spend_management",operation="pause_spending_periods",outcome="rejected"}',
      ),
    ).toBe(1);
    expect(sample(text, 'dependency_request_duration_seconds_count{dependency="postgres",operation="enable_agent",outcome="ok"}')).toBe(1);
    expect(sample(text, 'partner_keys_loaded')).toBe(1);
    expect(sample(text, 'partner_keys_reloads_total{source="file",outcome="success"}')).toBe(1);
    expect(sample(text, 'partner_keys_last_load_failed{source="file"}')).toBe(0);
    // The key set was loaded once, when the service started, and the age is measured from then.
    const loadedAt = sample(text, 'partner_keys_last_good_load_timestamp_seconds')!;
    expect(loadedAt).toBeGreaterThanOrEqual(startedAt);
    expect(loadedAt).toBeLessThanOrEqual(scrapedFrom);
    const age = sample(text, 'partner_keys_seconds_since_last_good_load')!;
    expect(age).toBeGreaterThanOrEqual(scrapedFrom - loadedAt - 0.001);
    expect(age).toBeLessThanOrEqual(scrapedTo - loadedAt + 0.001);
    // Series with nothing to count yet are exposed at exactly 0, so rate() sees their first event.
    for (const series of [
      'spend_management_auth_failures_total{status="401"}',
      'spend_management_auth_failures_total{status="403"}',
      'rate_limit_store_errors_total',
      'requests_shed_total',
      'campaigns_not_confirmed_total{dependency="spend_management"}',
      'campaigns_not_confirmed_total{dependency="redis"}',
      'partner_keys_reloads_total{source="file",outcome="invalid"}',
      'partner_keys_reloads_total{source="file",outcome="error"}',
      'circuit_breaker_events_total{breaker="redis",event="failure"}',
    ]) {
      expect(sample(text, series), series).toBe(0);
    }
    expect(text).toMatch(/^nodejs_eventloop_lag_p99_seconds /m);
    expect(text).toMatch(/^process_resident_memory_bytes /m);
    expect(text).not.toContain(key);
    expect(text).not.toContain(strangerKey);
    expect(text).not.toContain(agentId); // ids are never labels

    // Recovery is visible too: after the breaker's reset the campaigns are paused and counted.
    svc.service.breakers.spendManagement.close();
    expect((await send(key, { agentId, enabled: false })).json().pausedCampaignCount).toBe(3);
    const after = await scrape();
    expect(sample(after, 'campaigns_paused_total{partner="metered"}')).toBe(3);
    expect(sample(after, 'circuit_breaker_state{breaker="spend_management"}')).toBe(0);
  });

  it('labels unknown routes as unmatched, never with the raw URL', async () => {
    await svc.app.inject({ method: 'GET', url: '/partner/some/secret-looking/path?key=abc' });
    const text = await scrape();
    expect(text).toContain('route="unmatched"');
    expect(text).not.toContain('secret-looking');
  });
});
