// The typed partner client (clients/typescript) against any BASE_URL, as a partner's back end uses
// it: a status read and a disable made only if the agent did not change (If-Match), a repeat with
// the same Idempotency-Key answered as the first change, a stale tag refused with a typed 412, the
// history paged, and a webhook endpoint registered, listed and deleted.
import { randomUUID } from 'node:crypto';
import { createPartnerClient, PartnerApiError } from '../../clients/typescript/src/index.js';
import { expect, test } from '../support/fixtures.js';

const hookUrl = process.env.E2E_WEBHOOK_URL?.trim() || 'https://8.8.8.8/partner-agent-status-e2e';

test.describe('the typed partner client', () => {
  test('reads, disables with If-Match and an Idempotency-Key, refuses a stale tag, pages the history', async ({
    baseURL,
    given,
    partners,
  }) => {
    const partner = createPartnerClient({ baseUrl: baseURL!, apiKey: partners.open.key });
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 2 } });

    const read = await partner.getAgentStatus(agent.agentId);
    expect(read.data).toMatchObject({ agentId: agent.agentId, enabled: true, activeUnpausedCampaignCount: 2 });
    const idempotencyKey = randomUUID();
    const disabled = await partner.setAgentStatus({ agentId: agent.agentId, enabled: false }, { ifMatch: read.etag, idempotencyKey });
    expect(disabled).toMatchObject({ status: 200, replayed: false, data: { enabled: false, pausedCampaignCount: 2 } });
    const again = await partner.setAgentStatus({ agentId: agent.agentId, enabled: false }, { idempotencyKey });
    expect(again).toMatchObject({ status: 200, replayed: true, data: { enabled: false, pausedCampaignCount: 2 } });

    const stale = await partner.setAgentStatus({ agentId: agent.agentId, enabled: true }, { ifMatch: read.etag }).catch((error) => error);
    expect(stale).toBeInstanceOf(PartnerApiError);
    expect(stale).toMatchObject({ status: 412, requestId: expect.any(String) });

    await partner.setAgentStatus({ agentId: agent.agentId, enabled: true });
    const pages: boolean[][] = [];
    for await (const page of partner.statusChangePages(agent.agentId, { limit: 1 })) pages.push(page.changes.map((c) => c.enabled));
    expect(pages).toEqual([[true], [false]]);
  });

  test('registers, lists and deletes a webhook endpoint', async ({ baseURL, partners }) => {
    const partner = createPartnerClient({ baseUrl: baseURL!, apiKey: partners.other.key });
    const created = await partner.createWebhookEndpoint({ url: hookUrl, eventTypes: ['agent.disable.completed'] });
    try {
      expect(created.data.secret).toMatch(/^whsec_/);
      const listed = await partner.listWebhookEndpoints();
      expect(listed.data.endpoints.map((endpoint) => endpoint.id)).toContain(created.data.id);
      expect((await partner.listWebhookDeliveries(created.data.id)).data.deliveries).toEqual([]);
    } finally {
      await partner.deleteWebhookEndpoint(created.data.id);
    }
    const missing = await partner.listWebhookDeliveries(created.data.id).catch((error) => error);
    expect(missing).toMatchObject({ name: 'PartnerApiError', status: 404 });
  });
});
