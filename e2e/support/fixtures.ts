import { type APIRequestContext, type APIResponse, test as base, expect } from '@playwright/test';
import { waitFor } from '../../test/support/wait.js';
import { newPartnerKey, partnerKeyWriter } from './partner-keys.js';
import { Seeder } from './seeder.js';
import { type E2ESettings, loadSettings } from './settings.js';
import { SimulatorControl } from './simulator.js';

/** A partner of the run: a network of its own and a key bound to it. */
export interface Partner {
  name: string;
  key: string;
  networkId: string;
  requireAgentApproval: boolean;
}

/**
 * The worker's partners. `open` has a network without require_agent_approval, `strict` one with
 * it, `other` is a second open network (for "another network's key"). `limited` is an open
 * network for the rate-limit spec alone: it spends that network's whole budget, which no other
 * test must share.
 */
export interface Partners {
  open: Partner;
  strict: Partner;
  other: Partner;
  limited: Partner;
}

/** An agent seeded for one test, with its campaigns by state. */
export interface SeededAgent {
  agentId: string;
  networkId: string;
  /** Active and unpaused: what a disable pauses. */
  unpaused: string[];
  /** Active and already paused. */
  paused: string[];
  /** Inactive (and unpaused): a disable leaves them alone. */
  inactive: string[];
}

export interface Given {
  /** A new agent of the partner's network, with campaigns in the states asked for. */
  agent(
    partner: Partner,
    options?: { approved?: boolean; campaigns?: { unpaused?: number; paused?: number; inactive?: number } },
  ): Promise<SeededAgent>;
}

export interface PartnerApi {
  /** POST /partner/agents/status as the partner (or with any key, or none when null). */
  setStatus(
    partner: Partner | { key: string | null },
    body: { agentId: string; enabled: boolean },
    options?: { headers?: Record<string, string> },
  ): Promise<APIResponse>;
  /** POST /partner/agents/status with these exact body bytes and headers (no key added). */
  post(options: { data?: string | Buffer; headers?: Record<string, string> }): Promise<APIResponse>;
}

/** Where a set of campaigns is paused, store by store (each list in the order asked for). */
export interface PausedIn {
  database: string[];
  redis: string[];
  spendManagement: string[];
}

export interface Stores {
  /** Reads the three places that hold campaign state (docs/interfaces.md §5 and §6). */
  pausedIn(campaignIds: string[]): Promise<PausedIn>;
}

interface WorkerFixtures {
  settings: E2ESettings;
  seeder: Seeder;
  simulator: SimulatorControl;
  partners: Partners;
}

interface TestFixtures {
  given: Given;
  api: PartnerApi;
  stores: Stores;
}

const statusPath = '/partner/agents/status';

/**
 * Waits until the service answers for a new key: the partner's first call goes from 401 (the
 * service has not loaded the key yet) to 200. Polls; never sleeps a fixed time.
 */
async function waitUntilServed(http: APIRequestContext, partner: Partner, probeAgentId: string, timeoutMs: number): Promise<void> {
  let last = '';
  await waitFor(
    async () => {
      const response = await http.post(statusPath, {
        headers: { 'x-api-key': partner.key, 'content-type': 'application/json' },
        data: { agentId: probeAgentId, enabled: true },
        failOnStatusCode: false,
      });
      if (response.status() === 200) return true;
      last = `${response.status()} ${(await response.text()).slice(0, 300)}`;
      // 401: the key is not loaded yet. 502-504: a proxy in front has no ready pod yet. Anything
      // else will not change by waiting.
      if (![401, 502, 503, 504].includes(response.status())) {
        throw new Error(`waiting for the key of partner "${partner.name}" to be served, got ${last}`);
      }
      return false;
    },
    {
      timeoutMs,
      intervalMs: timeoutMs > 30_000 ? 2_000 : 100,
      failure: () => `the key of partner "${partner.name}" was not served within ${timeoutMs} ms (last answer: ${last})`,
    },
  );
}

export const test = base.extend<TestFixtures, WorkerFixtures>({
  settings: [
    // biome-ignore lint/correctness/noEmptyPattern: Playwright reads the fixture's dependencies from this pattern
    async ({}, use) => {
      await use(loadSettings());
    },
    { scope: 'worker' },
  ],

  seeder: [
    async ({ settings }, use) => {
      const seeder = new Seeder(settings);
      await use(seeder);
      await seeder.close();
    },
    { scope: 'worker' },
  ],

  simulator: [
    async ({ playwright, settings }, use) => {
      const http = await playwright.request.newContext({ baseURL: settings.simulatorUrl });
      await use(new SimulatorControl(http));
      await http.dispose();
    },
    { scope: 'worker' },
  ],

  /**
   * Four partners per worker: networks made in PostgreSQL, keys made at run time and added to
   * the service's key source in one change, then awaited. Keys are per worker, not per test,
   * because in the cluster a key change takes up to a minute or two to reach the pods; every test
   * still makes its own agents and campaigns, so tests never share rows.
   */
  partners: [
    async ({ playwright, settings, seeder }, use, workerInfo) => {
      const baseURL = workerInfo.project.use.baseURL;
      if (!baseURL) throw new Error('use.baseURL is not set (BASE_URL)');
      const tag = `e2e-w${workerInfo.parallelIndex}-${Date.now().toString(36)}`;
      const writer = partnerKeyWriter(settings.partnerKeys);
      const networkIds: string[] = [];
      const keys: string[] = [];
      const make = async (role: keyof Partners, requireAgentApproval: boolean): Promise<Partner> => {
        const networkId = await seeder.network({ requireAgentApproval });
        networkIds.push(networkId);
        return { name: `${tag}-${role}`, key: newPartnerKey(), networkId, requireAgentApproval };
      };
      try {
        const partners: Partners = {
          open: await make('open', false),
          strict: await make('strict', true),
          other: await make('other', false),
          limited: await make('limited', false),
        };
        const all = Object.values(partners);
        keys.push(...all.map((p) => p.key));
        await writer.add(Object.fromEntries(all.map((p) => [p.key, { networkId: p.networkId, name: p.name }])));
        const http = await playwright.request.newContext({ baseURL });
        try {
          await Promise.all(
            all.map(async (partner) =>
              waitUntilServed(http, partner, await seeder.agent(partner.networkId), settings.keyPropagationTimeoutMs),
            ),
          );
        } finally {
          await http.dispose();
        }

        await use(partners);
      } finally {
        // Also after a failed set-up: nothing of this worker stays in a long-lived cluster.
        if (settings.cleanup) {
          if (keys.length > 0) await writer.remove(keys);
          await seeder.deleteNetworks(networkIds);
        }
      }
    },
    // In the cluster the wait can take the kubelet's sync period and more: the wait's own limit
    // plus a minute for the rest (seeding, kubectl).
    { scope: 'worker', timeout: Number(process.env.E2E_KEY_PROPAGATION_TIMEOUT_MS || 180_000) + 60_000 },
  ],

  given: async ({ seeder }, use) => {
    await use({
      async agent(partner, options = {}) {
        const agentId = await seeder.agent(partner.networkId, { approved: options.approved ?? true });
        const counts = options.campaigns ?? {};
        return {
          agentId,
          networkId: partner.networkId,
          unpaused: counts.unpaused ? await seeder.campaigns(agentId, counts.unpaused) : [],
          paused: counts.paused ? await seeder.campaigns(agentId, counts.paused, { paused: true }) : [],
          inactive: counts.inactive ? await seeder.campaigns(agentId, counts.inactive, { active: false }) : [],
        };
      },
    });
  },

  stores: async ({ seeder, simulator }, use) => {
    await use({
      async pausedIn(campaignIds) {
        const [database, redis, spendManagement] = await Promise.all([
          seeder.pausedInDatabaseAmong(campaignIds),
          seeder.pausedInRedis(campaignIds),
          simulator.paused(campaignIds),
        ]);
        return { database, redis, spendManagement };
      },
    });
  },

  api: async ({ request }, use) => {
    await use({
      setStatus(partner, body, options = {}) {
        const headers: Record<string, string> = { 'content-type': 'application/json', ...options.headers };
        if (partner.key !== null) headers['x-api-key'] = partner.key;
        return request.post(statusPath, { headers, data: Buffer.from(JSON.stringify(body)), failOnStatusCode: false });
      },
      post({ data = '', headers = {} }) {
        // A Buffer goes out byte for byte. A string would not: with a JSON content type,
        // Playwright JSON-encodes a string that does not parse, so "malformed JSON" would arrive
        // as a well-formed JSON string.
        return request.post(statusPath, { headers, data: typeof data === 'string' ? Buffer.from(data) : data, failOnStatusCode: false });
      },
    });
  },
});

export { expect };

/** The media type of a response, without parameters. */
export function mediaType(response: APIResponse): string {
  return (response.headers()['content-type'] ?? '').split(';', 1)[0]!.trim();
}

/** RFC 9457 problem: checks the shape the contract fixes and returns the body. */
export async function expectProblem(response: APIResponse, status: number, kind: string): Promise<Record<string, unknown>> {
  expect(response.status(), await response.text()).toBe(status);
  expect(mediaType(response)).toBe('application/problem+json');
  const body = (await response.json()) as Record<string, unknown>;
  expect(body).toMatchObject({
    type: `urn:partner-agent-status:problem:${kind}`,
    title: expect.any(String),
    status,
    detail: expect.any(String),
    requestId: response.headers()['x-request-id'],
  });
  return body;
}
