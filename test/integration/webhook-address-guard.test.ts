import { once } from 'node:events';
import { createServer, type Server } from 'node:net';
import { Agent, buildConnector, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  allowedRanges,
  ForbiddenAddress,
  guardedConnector,
  type Lookup,
  refusalOfUrl,
  unreachableUrl,
} from '../../src/events/address-guard.js';

// A listening socket on every loopback address (IPv4 and IPv6) that counts the connections it
// accepts: a refusal must happen before any of them reaches it.
let server: Server;
let port: number;
let connections = 0;

beforeAll(async () => {
  server = createServer((socket) => {
    connections += 1;
    socket.end('HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n');
  });
  server.listen({ port: 0, host: '::', ipv6Only: false });
  await once(server, 'listening');
  port = (server.address() as { port: number }).port;
});

afterAll(async () => {
  server.close();
});

/** A resolver that answers every name with 127.0.0.1, as a rebinding DNS server would. */
const toLoopback: Lookup = (_hostname, options, callback) => {
  if (options.all) callback(null, [{ address: '127.0.0.1', family: 4 }]);
  else callback(null, '127.0.0.1', 4);
};

function guardedAgent(options: { allowed?: string[]; resolve?: Lookup } = {}) {
  return new Agent({
    connect: guardedConnector(
      {
        connectTimeoutMs: 2_000,
        allowed: options.allowed ? allowedRanges(options.allowed) : undefined,
        resolve: options.resolve,
      },
      buildConnector,
    ),
  });
}

function forbidden(error: unknown): boolean {
  for (let cause = error; cause; cause = (cause as { cause?: unknown }).cause) {
    if (cause instanceof ForbiddenAddress) return true;
  }
  return false;
}

describe('the sender connector refuses loopback in every form, with no connection reaching a listening socket', () => {
  const forms = ['127.0.0.1', 'localhost', '[::1]', '[::ffff:127.0.0.1]', '0.0.0.0', '2130706433', '127.1', '0x7f.1'];

  it.each(forms)('http://%s refused', async (host) => {
    const agent = guardedAgent();
    const before = connections;
    const error = await request(`http://${host}:${port}/hook`, { method: 'POST', body: '{}', dispatcher: agent }).then(
      () => undefined,
      (e: unknown) => e,
    );
    await agent.close();
    expect(forbidden(error), String(error)).toBe(true);
    expect(connections - before).toBe(0);
  });

  it('refuses a host name that resolves to 127.0.0.1 (checked on the address connected to, every connection)', async () => {
    const agent = guardedAgent({ resolve: toLoopback });
    const before = connections;
    const error = await request(`http://partner-hooks.example:${port}/hook`, { method: 'POST', body: '{}', dispatcher: agent }).then(
      () => undefined,
      (e: unknown) => e,
    );
    await agent.close();
    expect(forbidden(error), String(error)).toBe(true);
    expect(connections - before).toBe(0);
  });

  it('connects where the operator allowed it (the control: the socket does count connections)', async () => {
    const agent = guardedAgent({ allowed: ['127.0.0.1/32'], resolve: toLoopback });
    const before = connections;
    const response = await request(`http://partner-hooks.example:${port}/hook`, { method: 'POST', body: '{}', dispatcher: agent });
    await response.body.dump();
    await agent.close();
    expect(response.statusCode).toBe(204);
    expect(connections - before).toBe(1);
  });
});

describe('registration refuses URLs of addresses that are not public', () => {
  const settings = { allowHttp: false };

  it.each([
    ['https://127.0.0.1/hook'],
    ['https://[::1]/hook'],
    ['https://[::ffff:127.0.0.1]/hook'],
    ['https://169.254.169.254/latest/meta-data'],
    ['https://[fd00:ec2::254]/'],
    ['https://10.0.0.1/'],
    ['https://2130706433/'],
    ['https://localhost/hook'],
  ])('%s', async (url) => {
    expect(await refusalOfUrl(url, settings)).toBe(unreachableUrl);
  });

  it('refuses a name that resolves to loopback, and one that does not resolve, with the very refusal of a literal address', async () => {
    const nowhere: Lookup = (_hostname, _options, callback) => callback(Object.assign(new Error('not found'), { code: 'ENOTFOUND' }), []);
    const literal = await refusalOfUrl('https://127.0.0.1/', settings);
    expect(await refusalOfUrl('https://hooks.partner.example/', { ...settings, resolve: toLoopback })).toBe(literal);
    expect(await refusalOfUrl('https://internal-billing.partner.example/', { ...settings, resolve: nowhere })).toBe(literal);
    expect(literal).toBe(unreachableUrl);
  });

  it('takes port 443 only, unless the operator allows others', async () => {
    for (const port of [25, 22, 6379, 8443]) {
      expect(await refusalOfUrl(`https://8.8.8.8:${port}/`, settings), String(port)).toBe('url must use port 443');
    }
    expect(await refusalOfUrl('https://8.8.8.8:443/', settings)).toBeUndefined();
    expect(await refusalOfUrl('https://8.8.8.8:8443/', { ...settings, allowedPorts: [8443] })).toBeUndefined();
    expect(await refusalOfUrl('https://8.8.8.8:25/', { ...settings, allowedPorts: [8443] })).toBe('url must use port 443 (or 8443)');
  });

  it('refuses http unless WEBHOOK_ALLOW_HTTP, credentials in the URL and fragments', async () => {
    expect(await refusalOfUrl('http://8.8.8.8/', settings)).toBe('url must use https');
    expect(await refusalOfUrl('http://8.8.8.8/', { allowHttp: true })).toBeUndefined();
    expect(await refusalOfUrl('https://user:pw@8.8.8.8/', settings)).toMatch(/credentials/);
    expect(await refusalOfUrl('ftp://8.8.8.8/', settings)).toBe('url must use https');
    expect(await refusalOfUrl('not a url', settings)).toMatch(/absolute URL/);
  });

  it('accepts a public address', async () => {
    expect(await refusalOfUrl('https://8.8.8.8/hook', settings)).toBeUndefined();
  });
});
