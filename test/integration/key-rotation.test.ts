import { mkdirSync, mkdtempSync, readlinkSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { newApiKey, testDatabase } from '../support/data.js';
import { keysDocument, type PartnerKeyRecord } from '../support/environment.js';
import { startTestService, type TestService } from '../support/service.js';

/**
 * A Secret volume as kubelet writes it: the data lives in a timestamped directory, `..data` is a
 * symlink to it, and the visible file is a symlink through `..data`. An update writes a new
 * directory and renames a fresh symlink over `..data` in one step.
 */
function kubeletVolume() {
  const dir = mkdtempSync(join(tmpdir(), 'pas-kubelet-'));
  let generation = 0;
  function write(content: string) {
    const data = `..2026_11_21_${String(++generation).padStart(4, '0')}`;
    mkdirSync(join(dir, data));
    writeFileSync(join(dir, data, 'partner-keys.json'), content);
    let previous: string | undefined;
    try {
      previous = readlinkSync(join(dir, '..data'));
    } catch {
      previous = undefined;
    }
    symlinkSync(data, join(dir, '..data_tmp'));
    renameSync(join(dir, '..data_tmp'), join(dir, '..data'));
    if (previous) rmSync(join(dir, previous), { recursive: true });
  }
  return {
    dir,
    file: join(dir, 'partner-keys.json'),
    write,
    init(content: string) {
      write(content);
      symlinkSync(join('..data', 'partner-keys.json'), join(dir, 'partner-keys.json'));
    },
  };
}

const db = testDatabase();
let svc: TestService;
let volume: ReturnType<typeof kubeletVolume>;
let networkId: string;
let oldPartner: PartnerKeyRecord;
let newPartner: PartnerKeyRecord;

beforeAll(async () => {
  networkId = await db.network();
  oldPartner = { key: newApiKey(), networkId, name: 'rotating-old' };
  newPartner = { key: newApiKey(), networkId, name: 'rotating-new' };
  volume = kubeletVolume();
  volume.init(keysDocument([oldPartner]));
  // The file watch is the fast path; a long poll proves the watch sees kubelet's swap on its own.
  svc = await startTestService({ partners: [oldPartner], env: { PARTNER_KEYS_FILE: volume.file, PARTNER_KEYS_POLL_INTERVAL_MS: '10000' } });
});

afterAll(async () => {
  await svc?.close();
  await db.close();
  rmSync(volume.dir, { recursive: true, force: true });
});

/**
 * Waits for a reload to show, checking every 20 ms, for at most 5 s: the watch makes it
 * milliseconds, and the poll (every 10 s here) cannot stand in for a broken watch within that
 * bound. The poll on its own is tested in test/unit/key-sources.test.ts.
 */
async function eventually(check: () => Promise<boolean>) {
  await vi.waitFor(async () => expect(await check()).toBe(true), { timeout: 5_000, interval: 20 });
}

describe("partner keys reload across kubelet's ..data swap, with no restart and no failed request", () => {
  it('adds a key while requests with the old one keep succeeding', async () => {
    const agentId = await db.agent(networkId);
    const statuses: number[] = [];
    let running = true;
    const load = (async () => {
      while (running) statuses.push((await svc.setStatus(oldPartner.key, agentId, true)).statusCode);
    })();

    expect((await svc.setStatus(newPartner.key, agentId, true)).statusCode).toBe(401);
    volume.write(keysDocument([oldPartner, newPartner]));
    await eventually(async () => (await svc.setStatus(newPartner.key, agentId, true)).statusCode === 200);
    // and once more through a second swap
    volume.write(keysDocument([oldPartner, newPartner, { key: newApiKey(), networkId, name: 'third' }]));
    await eventually(async () => svc.service.keyStore.size === 3);
    // A few more with the old key after the last swap (a loaded machine may have sent few during it).
    const afterSwaps = statuses.length;
    await eventually(async () => statuses.length > Math.max(10, afterSwaps + 3));

    running = false;
    await load;
    expect(statuses.length).toBeGreaterThan(10);
    expect(statuses.every((s) => s === 200)).toBe(true);
  });

  it('keeps the last good key set when an update is invalid, and says so in the log and a metric', async () => {
    const agentId = await db.agent(networkId);
    volume.write('{"partner-keys": {"short": {"networkId": "not-a-uuid", "name": "x"}}}');
    await eventually(async () =>
      /partner_keys_reloads_total\{source="file",outcome="invalid"\} [1-9]/.test(
        await svc.service.metrics.registry.getSingleMetricAsString('partner_keys_reloads_total'),
      ),
    );
    expect((await svc.setStatus(oldPartner.key, agentId, true)).statusCode).toBe(200);
    expect((await svc.setStatus(newPartner.key, agentId, true)).statusCode).toBe(200);
    const warning = svc.logs.records().find((r) => r.msg === 'partner keys update rejected; serving the last good key set');
    expect(warning).toBeDefined();
    expect(svc.logs.lines.join('\n')).not.toContain('short');

    volume.write('not json at all');
    await eventually(async () => svc.logs.records().some((r) => r.reason === 'partner keys are not valid JSON'));
    expect((await svc.setStatus(oldPartner.key, agentId, true)).statusCode).toBe(200);
  });

  it('revokes a key that a later update removes', async () => {
    const agentId = await db.agent(networkId);
    volume.write(keysDocument([newPartner]));
    await eventually(async () => (await svc.setStatus(oldPartner.key, agentId, true)).statusCode === 401);
    expect((await svc.setStatus(newPartner.key, agentId, true)).statusCode).toBe(200);
  });
});
