import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { waitFor } from './wait.js';

export interface ReceivedWebhook {
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
  answer: ReceiverAnswer;
  path: string;
}

/** What the receiver does with one request: answer a status (with headers), or never answer. */
export type ReceiverAnswer = number | { status: number; headers?: Record<string, string> } | 'hang';

/**
 * A partner's webhook endpoint on a loopback address: records every request and every connection,
 * and answers from a script (the next answer of `answers` for each request, then `otherwise`).
 */
export async function startReceiver(
  options: {
    host?: string;
    answers?: ReceiverAnswer[];
    otherwise?: ReceiverAnswer;
    /** An answer by path, before the script (one host serving many tenants' endpoints by path). */
    byPath?: (path: string) => ReceiverAnswer | undefined;
  } = {},
) {
  const received: ReceivedWebhook[] = [];
  const answers = [...(options.answers ?? [])];
  const hanging = new Set<ServerResponse>();
  let connections = 0;
  let otherwise: ReceiverAnswer = options.otherwise ?? 200;
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const answer = options.byPath?.(request.url ?? '/') ?? answers.shift() ?? otherwise;
      received.push({
        headers: request.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        at: Date.now(),
        answer,
        path: request.url ?? '/',
      });
      if (answer === 'hang') {
        hanging.add(response);
        return;
      }
      const { status, headers } = typeof answer === 'number' ? { status: answer, headers: {} } : answer;
      response.writeHead(status, headers).end();
    });
  });
  server.on('connection', () => {
    connections += 1;
  });
  const host = options.host ?? '127.0.0.1';
  server.listen(0, host);
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  /** Ends the requests left hanging: their connections are cut, as by an endpoint that gave up. */
  const endHanging = () => {
    for (const response of hanging) response.destroy();
    hanging.clear();
  };
  return {
    url: `http://${host}:${port}/hook`,
    port,
    received,
    get connections() {
      return connections;
    },
    /** Requests answered 'hang' that are still waiting. */
    get hanging() {
      return hanging.size;
    },
    answerWith(answer: ReceiverAnswer) {
      otherwise = answer;
    },
    endHanging,
    async close() {
      endHanging();
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}

export type Receiver = Awaited<ReturnType<typeof startReceiver>>;

/** The receivers a test file starts: each test's are closed after it (closeAll in afterEach). */
export function receiverSet() {
  const started: Receiver[] = [];
  return {
    async start(options: Parameters<typeof startReceiver>[0] = {}) {
      const made = await startReceiver(options);
      started.push(made);
      return made;
    },
    async closeAll() {
      await Promise.all(started.splice(0).map((receiver) => receiver.close()));
    },
  };
}

/** A partner's JSON call, in process (app.inject), with its key. */
export function partnerCall(
  app: { inject: (options: object) => Promise<LightResponse> },
  method: string,
  url: string,
  key: string,
  payload?: unknown,
) {
  return app.inject({
    method,
    url,
    headers: { 'x-api-key': key, ...(payload === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(payload === undefined ? {} : { payload: JSON.stringify(payload) }),
  });
}

type LightResponse = Awaited<ReturnType<FastifyInstance['inject']>>;

/**
 * Waits until the partner API serves a keyed request: a start that blocked the event loop for
 * over a second (a busy machine) leaves under-pressure's first sample without a reading, which it
 * takes for overload, and the partner routes answer 503 until the next sample.
 */
export async function servedAfterStart(app: { inject: (options: object) => Promise<LightResponse> }, key: string): Promise<void> {
  await waitFor(async () => (await partnerCall(app, 'GET', '/partner/webhook-endpoints', key)).statusCode === 200, {
    timeoutMs: 15_000,
    intervalMs: 100,
    failure: 'the partner API did not serve a request after start',
  });
}
