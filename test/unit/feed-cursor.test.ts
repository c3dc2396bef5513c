import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { decodeCursor, encodeCursor, isAfter } from '../../src/events/feed-cursor.js';

describe('the events feed cursor (docs/interfaces.md §17)', () => {
  it('names a position and reads back as the same position', () => {
    for (const position of [
      { batch: '0', position: null },
      { batch: '42', position: '1007' },
      { batch: '9223372036854775807', position: '9223372036854775807' },
    ]) {
      expect(decodeCursor(encodeCursor(position))).toEqual(position);
    }
  });

  it('refuses anything it did not make: other text, leading zeros, numbers past bigint, other versions', () => {
    const encoded = (text: string) => Buffer.from(text).toString('base64url');
    for (const cursor of [
      '',
      'nonsense!',
      encoded('1:01:2'),
      encoded('1:9223372036854775808:'),
      encoded('2:1:2'),
      encoded('1:1'),
      'x'.repeat(65),
    ]) {
      expect(decodeCursor(cursor), cursor).toBeUndefined();
    }
    // Padding or another spelling of the same bytes is not the cursor that was given.
    expect(decodeCursor(`${encodeCursor({ batch: '4', position: '5' })}=`)).toBeUndefined();
  });

  it('orders positions by batch, then position; the whole batch after each of its events', () => {
    expect(isAfter({ batch: '2', position: '1' }, { batch: '1', position: '900' })).toBe(true);
    expect(isAfter({ batch: '2', position: '5' }, { batch: '2', position: '4' })).toBe(true);
    expect(isAfter({ batch: '2', position: '5' }, { batch: '2', position: null })).toBe(false);
    expect(isAfter({ batch: '2', position: null }, { batch: '2', position: '5' })).toBe(true);
    expect(isAfter({ batch: '2', position: null }, { batch: '2', position: null })).toBe(false);
  });
});

describe('the feed settings', () => {
  const base = {
    DATABASE_URL: 'postgres://db/x',
    REDIS_URL: 'redis://r',
    SPEND_MANAGEMENT_URL: 'http://s',
    PARTNER_KEYS_FILE: '/dev/null',
  };

  it('keeps 30 days, 5 streams a network, a line every 10 s by default', () => {
    const { feed } = loadConfig(base);
    expect(feed).toEqual({ retentionMs: 30 * 86_400_000, maxStreamsPerNetwork: 5, heartbeatMs: 10_000, pollIntervalMs: 100 });
  });

  it("prunes the relay's batches no sooner than the feed serves them", () => {
    expect(loadConfig(base).events.retentionMs).toBe(30 * 86_400_000);
    expect(loadConfig({ ...base, EVENTS_FEED_RETENTION_DAYS: '1', EVENTS_RETENTION_MS: '3600000' }).events.retentionMs).toBe(86_400_000);
    expect(loadConfig({ ...base, EVENTS_FEED_RETENTION_DAYS: '1', EVENTS_RETENTION_MS: String(2 * 86_400_000) }).events.retentionMs).toBe(
      2 * 86_400_000,
    );
  });

  it('refuses a heartbeat longer than 15 s and a retention of 0 days', () => {
    expect(() => loadConfig({ ...base, EVENTS_FEED_HEARTBEAT_MS: '20000' })).toThrow(/EVENTS_FEED_HEARTBEAT_MS/);
    expect(() => loadConfig({ ...base, EVENTS_FEED_RETENTION_DAYS: '0' })).toThrow(/EVENTS_FEED_RETENTION_DAYS/);
  });
});
