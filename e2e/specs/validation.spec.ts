// The request and its validation: docs/interfaces.md §3 (the strict body, 415, 413).
import { expect, expectProblem, type SeededAgent, type Stores, test } from '../support/fixtures.js';
import type { Seeder } from '../support/seeder.js';

const json = { 'content-type': 'application/json' };

test.describe('A body that fails validation yields 400 and changes nothing', () => {
  const cases: Array<[string, (agentId: string) => string, RegExp]> = [
    ['an unknown property', (agentId) => JSON.stringify({ agentId, enabled: false, reason: 'fraud' }), /reason/],
    ['enabled as the string "false"', (agentId) => JSON.stringify({ agentId, enabled: 'false' }), /enabled/],
    ['enabled as 0', (agentId) => JSON.stringify({ agentId, enabled: 0 }), /enabled/],
    ['enabled as null', (agentId) => JSON.stringify({ agentId, enabled: null }), /enabled/],
    ['enabled missing', (agentId) => JSON.stringify({ agentId }), /enabled/],
    ['agentId missing', () => JSON.stringify({ enabled: false }), /agentId/],
    ['agentId as a number', () => JSON.stringify({ agentId: 42, enabled: false }), /agentId/],
    [
      'agentId without the region prefix',
      (agentId) => JSON.stringify({ agentId: agentId.replace('us-east-1:', ''), enabled: false }),
      /agentId/,
    ],
    [
      'agentId in another region',
      (agentId) => JSON.stringify({ agentId: agentId.replace('us-east-1:', 'eu-west-1:'), enabled: false }),
      /agentId/,
    ],
    [
      'agentId with an upper-case uuid',
      (agentId) => JSON.stringify({ agentId: `us-east-1:${agentId.slice(10).toUpperCase()}`, enabled: false }),
      /agentId/,
    ],
    ['agentId with something that is not a uuid', () => JSON.stringify({ agentId: 'us-east-1:not-a-uuid', enabled: false }), /agentId/],
    ['a JSON array instead of an object', (agentId) => JSON.stringify([{ agentId, enabled: false }]), /object/i],
    ['a JSON string instead of an object', () => JSON.stringify('disable it'), /object/i],
    ['malformed JSON', (agentId) => `{"agentId": "${agentId}", "enabled": false`, /JSON/],
    ['an empty body', () => '', /JSON|object|empty/i],
  ];

  for (const [name, body, detail] of cases) {
    test(`${name} gets 400`, async ({ api, given, partners, seeder, stores }) => {
      const agent = await given.agent(partners.open, { campaigns: { unpaused: 1 } });
      const response = await api.post({ headers: { ...json, 'x-api-key': partners.open.key }, data: body(agent.agentId) });
      const problem = await expectProblem(response, 400, 'validation');
      expect(problem.detail).toMatch(detail);
      await expectUnchanged(agent, seeder, stores);
    });
  }
});

test.describe('Only JSON bodies are accepted: any other content type yields 415', () => {
  for (const contentType of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml']) {
    test(`${contentType} gets 415`, async ({ api, given, partners, seeder, stores }) => {
      const agent = await given.agent(partners.open, { campaigns: { unpaused: 1 } });
      const data =
        contentType === 'application/x-www-form-urlencoded'
          ? `agentId=${encodeURIComponent(agent.agentId)}&enabled=false`
          : JSON.stringify({ agentId: agent.agentId, enabled: false });
      const response = await api.post({ headers: { 'content-type': contentType, 'x-api-key': partners.open.key }, data });
      const problem = await expectProblem(response, 415, 'unsupported-media-type');
      expect(problem.detail).toMatch(/application\/json/);
      await expectUnchanged(agent, seeder, stores);
    });
  }

  test('application/json with a charset is accepted', async ({ api, given, partners }) => {
    const agent = await given.agent(partners.open);
    const response = await api.post({
      headers: { 'content-type': 'application/json; charset=utf-8', 'x-api-key': partners.open.key },
      data: JSON.stringify({ agentId: agent.agentId, enabled: true }),
    });
    expect(response.status()).toBe(200);
  });
});

test.describe('A body over 16 KiB yields 413', () => {
  test('a 17 KiB body gets 413 and changes nothing', async ({ api, given, partners, seeder, stores }) => {
    const agent = await given.agent(partners.open, { campaigns: { unpaused: 1 } });
    const data = JSON.stringify({ agentId: agent.agentId, enabled: false, padding: 'x'.repeat(17 * 1024) });
    const response = await api.post({ headers: { ...json, 'x-api-key': partners.open.key }, data });
    const problem = await expectProblem(response, 413, 'payload-too-large');
    expect(problem.detail).toMatch(/16 KiB/);
    await expectUnchanged(agent, seeder, stores);
  });

  test('a body just under 16 KiB is read (and refused for its unknown property, 400)', async ({ api, given, partners }) => {
    const agent = await given.agent(partners.open);
    const skeleton = JSON.stringify({ agentId: agent.agentId, enabled: false, padding: '' });
    const data = JSON.stringify({ agentId: agent.agentId, enabled: false, padding: 'x'.repeat(16 * 1024 - skeleton.length) });
    expect(Buffer.byteLength(data)).toBe(16 * 1024);
    await expectProblem(await api.post({ headers: { ...json, 'x-api-key': partners.open.key }, data }), 400, 'validation');
  });
});

/** Nothing happened to the agent: still approved, its campaigns unpaused everywhere. */
async function expectUnchanged(agent: SeededAgent, seeder: Seeder, stores: Stores): Promise<void> {
  expect(await seeder.agentApproved(agent.agentId)).toBe(true);
  expect(await stores.pausedIn(agent.unpaused)).toEqual({ database: [], redis: [], spendManagement: [] });
}
