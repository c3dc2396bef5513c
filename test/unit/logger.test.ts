import { randomBytes } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { createLogger } from '../../src/observability/logger.js';
import { statusPath } from '../support/partner.js';
import { logCapture } from '../support/service.js';

const key = `pk_test_${randomBytes(24).toString('base64url')}`;

function logOnce(write: (logger: ReturnType<typeof createLogger>) => void) {
  const logs = logCapture();
  write(createLogger('trace', logs.stream));
  expect(logs.lines).toHaveLength(1);
  return { line: logs.records()[0]!, text: logs.lines[0]! };
}

describe('logger: nothing key-like reaches a line, at any level', () => {
  it('drops the raw bytes Node attaches to a parse error, and keeps the rest of the error', () => {
    const error = Object.assign(new Error('Parse Error: Invalid header value char'), {
      code: 'HPE_INVALID_HEADER_TOKEN',
      rawPacket: Buffer.from(`GET / HTTP/1.1\r\nx-api-key: ${key}\r\n\r\n`),
      bytesParsed: 40,
    });
    const { line, text } = logOnce((logger) => logger.trace({ err: error }, 'client error'));
    expect(line.err).toMatchObject({ type: 'Error', message: 'Parse Error: Invalid header value char', code: 'HPE_INVALID_HEADER_TOKEN' });
    expect(line.err).not.toHaveProperty('rawPacket');
    expect(line.err).not.toHaveProperty('bytesParsed');
    expect(text).not.toContain(key);
  });

  it('logs a request as method, path and route: never its query string or headers', () => {
    const request = {
      method: 'GET',
      url: `${statusPath}?api_key=${key}`,
      headers: { 'x-api-key': key },
      routeOptions: { url: statusPath },
    };
    const { line, text } = logOnce((logger) => logger.info({ req: request }, 'incoming'));
    expect(line.req).toEqual({ method: 'GET', path: statusPath, route: statusPath });
    expect(text).not.toContain(key);
  });

  it('removes credential headers wherever a header object is logged', () => {
    const { text } = logOnce((logger) =>
      logger.warn({ headers: { 'x-api-key': key, authorization: `Bearer ${key}`, cookie: key, accept: '*/*' } }, 'headers'),
    );
    expect(text).toContain('"accept":"*/*"');
    expect(text).not.toContain(key);
  });
});

describe('logger: standard output in chunks', () => {
  it('holds info lines briefly, writes a warn line at once with what was held, and the rest by the next flush', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pas-log-'));
    const path = join(dir, 'out.log');
    const fd = openSync(path, 'w');
    // vitest's clock: the 250 ms flush runs when the test moves the clock, not when the machine gets to it.
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    try {
      const logger = createLogger('info', fd);
      const lines = () => readFileSync(path, 'utf8').split('\n').filter(Boolean);
      logger.info('first');
      await new Promise((resolve) => setImmediate(resolve));
      expect(lines()).toEqual([]); // held: no write per line
      logger.warn('second');
      await vi.waitFor(() => expect(lines().map((line) => JSON.parse(line).msg)).toEqual(['first', 'second']), { timeout: 100 });
      logger.info('third');
      await vi.advanceTimersByTimeAsync(250); // the 250 ms flush
      await vi.waitFor(() => expect(lines()).toHaveLength(3), { timeout: 2_000 });
    } finally {
      vi.useRealTimers();
      closeSync(fd);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
