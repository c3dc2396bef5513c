import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { hashKey } from '../../src/auth/partner-keys.js';
import { testDatabase } from '../support/data.js';
import { startTestService, type TestService } from '../support/service.js';

/**
 * The built keys tool (`node dist/keys.js`, as the image runs it) changing a key set file that a
 * running service watches: what it issues is accepted and what it revokes refused within the 10 s
 * of docs/interfaces.md §4, and requests with a key that stays never fail meanwhile.
 */
const root = fileURLToPath(new URL('../..', import.meta.url));
const run = promisify(execFile);
const db = testDatabase();
const directory = mkdtempSync(join(tmpdir(), 'pas-keys-file-'));
const file = join(directory, 'partner-keys.json');
const printed: string[] = [];
let svc: TestService;
let networkId: string;
let keyA: string;

async function keys(...argv: string[]) {
  const { stdout, stderr } = await run(process.execPath, ['dist/keys.js', ...argv, '--file', file], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '' },
  });
  printed.push(stderr);
  return { stdout, stderr };
}
async function issue(name: string, ...more: string[]) {
  const { stdout, stderr } = await keys('issue', '--network', networkId, '--name', name, ...more);
  expect(stderr).toMatch(new RegExp(`^issued "${name}" .*\\n$`));
  return stdout.trim();
}

beforeAll(async () => {
  networkId = await db.network();
  keyA = await issue('partner-a');
  // A long poll: the directory watch has to see the tool's rename on its own.
  svc = await startTestService({ partners: [], env: { PARTNER_KEYS_FILE: file, PARTNER_KEYS_POLL_INTERVAL_MS: '10000' } });
});

afterAll(async () => {
  await svc?.close();
  await db.close();
  rmSync(directory, { recursive: true, force: true });
});

const status = async (apiKey: string) => (await svc.setStatus(apiKey, await db.agent(networkId), true)).statusCode;

/** Requests with one key in a loop until stopped; resolves with every status seen. */
function requestsWith(apiKey: string) {
  let running = true;
  const statuses: number[] = [];
  const done = (async () => {
    while (running) statuses.push(await status(apiKey));
    return statuses;
  })();
  return async () => {
    running = false;
    return done;
  };
}

/** How long until `check` holds, checking every 20 ms; fails past the contract's 10 s. */
async function secondsUntil(check: () => Promise<boolean>): Promise<number> {
  const started = performance.now();
  await vi.waitFor(async () => expect(await check()).toBe(true), { timeout: 10_000, interval: 20 });
  return (performance.now() - started) / 1000;
}

const metricLine = async (series: string) =>
  (await svc.service.metrics.registry.metrics()).split('\n').find((line) => line.startsWith(`${series} `));

describe('the keys tool and a running service watching the file', () => {
  it('gets an issued key accepted and a revoked one refused within 10 s, with no failed request', async () => {
    expect(await status(keyA)).toBe(200);
    const stopA = requestsWith(keyA);
    const keyB = await issue('partner-b');
    const acceptedAfter = await secondsUntil(async () => (await status(keyB)) === 200);
    const statusesA = await stopA();

    const stopB = requestsWith(keyB);
    await keys('revoke', '--fingerprint', hashKey(keyA).slice(0, 12));
    const refusedAfter = await secondsUntil(async () => (await status(keyA)) === 401);
    const statusesB = await stopB();

    expect(acceptedAfter).toBeLessThan(10);
    expect(refusedAfter).toBeLessThan(10);
    expect(statusesA.length).toBeGreaterThan(5);
    expect(statusesB.length).toBeGreaterThan(5);
    expect([...statusesA, ...statusesB].every((s) => s === 200)).toBe(true);
    expect(readdirSync(directory)).toEqual(['partner-keys.json']);
    expect(await metricLine('partner_requests_authenticated_total{partner="partner-b"}')).toMatch(/ ([1-9]\d*)$/);
    // partner-a's series went away with its key
    expect(await metricLine('partner_requests_authenticated_total{partner="partner-a"}')).toBeUndefined();
  });

  it('serves a raw and a hashed entry side by side, and refuses a key from its expiresAt on', async () => {
    const expiresAt = new Date(Date.now() + 10_000).toISOString();
    const raw = await issue('raw-expiring', '--raw', '--expires-at', expiresAt);
    const hashed = await issue('hashed-lasting');
    const { stdout: listing } = await keys('list');
    expect(listing).toMatch(/raw-expiring\s+\S+\s+\S+\s+raw\s+default\n/);
    expect(listing).toMatch(/hashed-lasting\s+\S+\s+never\s+hashed\s+default\n/);
    await vi.waitFor(async () => expect(await status(raw)).toBe(200), { timeout: 10_000, interval: 20 });
    expect(await status(hashed)).toBe(200);
    expect(await metricLine('partner_keys_expiring_soon{partner="raw-expiring",state="expiring"}')).toMatch(/ 1$/);

    await vi.waitFor(async () => expect(await status(raw)).toBe(401), { timeout: 20_000, interval: 100 });
    expect(Date.now()).toBeGreaterThanOrEqual(Date.parse(expiresAt));
    expect(await status(hashed)).toBe(200);
    expect(await metricLine('partner_keys_expiring_soon{partner="raw-expiring",state="expired"}')).toMatch(/ 1$/);
    expect(await metricLine('partner_keys_expiring_soon{partner="raw-expiring",state="expiring"}')).toBeUndefined();
  });

  it('rotates under one name: a second key issued under a name in the set works beside the first, list tells them apart, and revoking the old one leaves the new', async () => {
    const old = await issue('partner-rotating', '--raw');
    const fresh = await issue('partner-rotating');
    expect(printed.at(-1)).toMatch(/2 keys are now named "partner-rotating"/);
    await vi.waitFor(async () => expect(await status(fresh)).toBe(200), { timeout: 10_000, interval: 20 });
    expect(await status(old)).toBe(200);
    expect(statSync(file).mode & 0o777).toBe(0o600);

    const { stdout: listing } = await keys('list');
    const rows = listing.split('\n').filter((line) => / partner-rotating /.test(line));
    expect(rows.map((row) => row.split(/\s+/)[0]).sort()).toEqual([hashKey(old), hashKey(fresh)].map((d) => d.slice(0, 12)).sort());
    expect(listing).not.toContain(old);

    await expect(keys('revoke', '--name', 'partner-rotating')).rejects.toMatchObject({ code: 1 });
    await keys('revoke', '--fingerprint', hashKey(old).slice(0, 12));
    await vi.waitFor(async () => expect(await status(old)).toBe(401), { timeout: 10_000, interval: 20 });
    expect(await status(fresh)).toBe(200);
    expect(await metricLine('partner_requests_authenticated_total{partner="partner-rotating"}')).toMatch(/ ([1-9]\d*)$/);
  });

  it('never wrote a key to the service log or the tool messages', async () => {
    const issued = printed.length;
    expect(issued).toBeGreaterThan(4);
    const everything = svc.logs.lines.join('\n') + printed.join('');
    expect(everything).not.toContain('pas_');
    expect(everything).not.toMatch(/[0-9a-f]{64}/);
  });
});
