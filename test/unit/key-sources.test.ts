import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { fileKeySource, secretsManagerKeySource } from '../../src/auth/key-sources.js';
import { PartnerKeyStore } from '../../src/auth/partner-keys.js';
import { createLogger } from '../../src/observability/logger.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { newApiKey } from '../support/data.js';
import { keysDocument } from '../support/environment.js';
import { logCapture } from '../support/service.js';

const networkId = '6f9619ff-8b86-4d01-b42d-00cf4fc964ff';

// The Secrets Manager source's logic, with the one SDK call replaced by a function returning the
// secret string. The SDK call itself (configured-key-source.ts) is tested end to end against a
// local server in test/integration/secrets-manager.test.ts.
function source(responses: Array<string | Error>) {
  const store = new PartnerKeyStore();
  const metrics = createMetrics({ collectDefaults: false });
  const logs = logCapture();
  let call = 0;
  const keySource = secretsManagerKeySource({
    store,
    metrics,
    log: createLogger('info', logs.stream),
    refreshIntervalMs: 60_000,
    fetchSecret: async () => {
      const next = responses[Math.min(call++, responses.length - 1)]!;
      if (next instanceof Error) throw next;
      return next;
    },
  });
  return { store, metrics, logs, keySource };
}

describe('partner keys from AWS Secrets Manager', () => {
  it('refuses to start without a valid set', async () => {
    await expect(source(['{"partner-keys": {}}']).keySource.start()).rejects.toThrow(/holds no key/);
    await expect(source([Object.assign(new Error('denied'), { name: 'AccessDeniedException' })]).keySource.start()).rejects.toThrow(
      /could not be read from secrets_manager: AccessDeniedException/,
    );
  });

  it('loads at start, applies a good refresh, and keeps the last good set through bad ones', async () => {
    const first = newApiKey();
    const second = newApiKey();
    const { store, metrics, logs, keySource } = source([
      keysDocument([{ key: first, networkId, name: 'one' }]),
      keysDocument([{ key: second, networkId, name: 'two' }]),
      'garbage',
      new Error('network down'),
    ]);
    await keySource.start();
    expect(store.lookup(first)?.name).toBe('one');

    await keySource.reload();
    expect(store.lookup(first)).toBeUndefined();
    expect(store.lookup(second)?.name).toBe('two');

    await keySource.reload();
    await keySource.reload();
    expect(store.lookup(second)?.name).toBe('two');
    keySource.stop();

    const counts = await metrics.registry.getSingleMetricAsString('partner_keys_reloads_total');
    expect(counts).toContain('partner_keys_reloads_total{source="secrets_manager",outcome="success"} 2');
    expect(counts).toContain('partner_keys_reloads_total{source="secrets_manager",outcome="invalid"} 1');
    expect(counts).toContain('partner_keys_reloads_total{source="secrets_manager",outcome="error"} 1');
    expect(await metrics.registry.getSingleMetricAsString('partner_keys_loaded')).toContain('partner_keys_loaded 1');
    expect(logs.lines.join('\n')).not.toContain(first);
    expect(logs.lines.join('\n')).not.toContain(second);
  });

  it('reports a failed load until a good read: a transient read error clears, a rejected version does not', async () => {
    const good = keysDocument([{ key: newApiKey(), networkId, name: 'one' }]);
    const { metrics, keySource } = source([good, new Error('throttled'), good, 'garbage', 'garbage', good]);
    const failed = async () =>
      /partner_keys_last_load_failed\{source="secrets_manager"\} (\d)/.exec(
        await metrics.registry.getSingleMetricAsString('partner_keys_last_load_failed'),
      )?.[1];
    await keySource.start();
    expect(await failed()).toBe('0');
    await keySource.reload(); // read error
    expect(await failed()).toBe('1');
    await keySource.reload(); // the same good document again
    expect(await failed()).toBe('0');
    await keySource.reload(); // a bad version
    expect(await failed()).toBe('1');
    await keySource.reload(); // still the bad version
    expect(await failed()).toBe('1');
    await keySource.reload(); // fixed
    expect(await failed()).toBe('0');
    keySource.stop();
  });
});

describe('partner keys from a file: the poll catches what the directory watch misses', () => {
  it('reloads a change that raises no event in the watched directory', async () => {
    // The service watches the key file's directory. Here that file is a symlink to a file in
    // another directory, so rewriting the target changes nothing the watch can see: only the poll
    // can pick the change up. A poll that is broken or not started fails this test.
    const linkDir = mkdtempSync(join(tmpdir(), 'pas-keys-link-'));
    const targetDir = mkdtempSync(join(tmpdir(), 'pas-keys-target-'));
    const first = newApiKey();
    const second = newApiKey();
    const target = join(targetDir, 'partner-keys.json');
    writeFileSync(target, keysDocument([{ key: first, networkId, name: 'one' }]));
    symlinkSync(target, join(linkDir, 'partner-keys.json'));
    const store = new PartnerKeyStore();
    const metrics = createMetrics({ collectDefaults: false });
    const logs = logCapture();
    // vitest's clock drives the poll: it runs when the test moves the clock by its interval.
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const keySource = fileKeySource({
      store,
      metrics,
      log: createLogger('info', logs.stream),
      path: join(linkDir, 'partner-keys.json'),
      pollIntervalMs: 100,
    });
    try {
      await keySource.start();
      expect(store.lookup(first)?.name).toBe('one');
      writeFileSync(target, keysDocument([{ key: second, networkId, name: 'two' }]));
      await vi.advanceTimersByTimeAsync(100);
      await vi.waitFor(() => expect(store.lookup(second)?.name).toBe('two'), { timeout: 5_000, interval: 20 });
      expect(store.lookup(first)).toBeUndefined();
      expect(logs.records().map((r) => r.msg)).toEqual(['partner keys loaded', 'partner keys reloaded']);
    } finally {
      keySource.stop();
      vi.useRealTimers();
      rmSync(linkDir, { recursive: true, force: true });
      rmSync(targetDir, { recursive: true, force: true });
    }
  });
});

describe('the key set described in the metrics and the log, by name and never by key', () => {
  it('reports weak raw keys, soon-expiring keys and per-name request counters at load', async () => {
    const short = `${newApiKey().slice(0, 20)}`;
    const legacy = `pk_live_${newApiKey().slice(4)}`;
    const soon = new Date(Date.now() + 3 * 24 * 3600 * 1000).toISOString();
    const later = new Date(Date.now() + 30 * 24 * 3600 * 1000).toISOString();
    const gone = new Date(Date.now() - 1000).toISOString();
    const text = JSON.stringify({
      'partner-keys': {
        [newApiKey()]: { networkId, name: 'good' },
        [short]: { networkId, name: 'short one' },
        [legacy]: { networkId, name: 'legacy' },
        [newApiKey()]: { networkId, name: 'soon', expiresAt: soon },
        [newApiKey()]: { networkId, name: 'later', expiresAt: later },
        [newApiKey()]: { networkId, name: 'gone', expiresAt: gone },
      },
    });
    const { metrics, logs, keySource } = source([text]);
    await keySource.start();
    const warnings = logs.records().filter((r) => r.msg === 'partner key is weak or not in the issued format; replace it');
    expect(warnings.map((r) => [r.partner, r.reason])).toEqual([
      ['short one', 'short'],
      ['legacy', 'unformatted'],
    ]);
    const exposition = await metrics.registry.metrics();
    expect(exposition).toContain('partner_keys_weak{partner="short one",reason="short"} 1');
    expect(exposition).toContain('partner_keys_weak{partner="legacy",reason="unformatted"} 1');
    expect(exposition).toContain('partner_keys_expiring_soon{partner="soon",state="expiring"} 1');
    expect(exposition).toContain('partner_keys_expiring_soon{partner="gone",state="expired"} 1');
    expect(exposition).not.toMatch(/partner_keys_expiring_soon\{partner="(later|good)"/);
    for (const name of ['good', 'short one', 'legacy', 'soon', 'later', 'gone']) {
      expect(exposition).toContain(`partner_requests_authenticated_total{partner="${name}"} 0`);
    }
    for (const entry of Object.keys(JSON.parse(text)['partner-keys'])) {
      expect(exposition).not.toContain(entry);
      expect(logs.lines.join('\n')).not.toContain(entry);
    }
  });

  it('keeps the last good set when a reload brings a malformed hashed entry or expiresAt', async () => {
    const key = newApiKey();
    const good = keysDocument([{ key, networkId, name: 'kept' }]);
    const upperHash = JSON.stringify({ 'partner-keys': { [`sha256:${'A'.repeat(64)}`]: { networkId, name: 'upper' } } });
    const badExpiry = JSON.stringify({ 'partner-keys': { [newApiKey()]: { networkId, name: 'bad date', expiresAt: '31/01/2027' } } });
    const { store, metrics, logs, keySource } = source([good, upperHash, badExpiry]);
    await keySource.start();
    for (const expected of [/a hashed entry must be/, /expiresAt must be an RFC 3339 date-time/]) {
      await keySource.reload();
      expect(store.lookup(key)?.name).toBe('kept');
      expect(logs.records().at(-1)).toMatchObject({
        msg: 'partner keys update rejected; serving the last good key set',
        reason: expect.stringMatching(expected),
      });
    }
    const exposition = await metrics.registry.metrics();
    expect(exposition).toContain('partner_keys_reloads_total{source="secrets_manager",outcome="invalid"} 2');
    expect(exposition).toContain('partner_keys_last_load_failed{source="secrets_manager"} 1');
  });

  it('drops the series of a name that a reload removes', async () => {
    const { metrics, keySource } = source([
      keysDocument([
        { key: newApiKey(), networkId, name: 'stays' },
        { key: newApiKey(), networkId, name: 'leaves' },
      ]),
      keysDocument([{ key: newApiKey(), networkId, name: 'stays' }]),
    ]);
    await keySource.start();
    await keySource.reload();
    const exposition = await metrics.registry.metrics();
    expect(exposition).toContain('partner_requests_authenticated_total{partner="stays"} 0');
    expect(exposition).not.toContain('leaves');
  });
});
