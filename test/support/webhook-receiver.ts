import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';

export interface ReceivedWebhook {
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
  answer: ReceiverAnswer;
}

/** What the receiver does with one request: answer a status (with headers), or never answer. */
export type ReceiverAnswer = number | { status: number; headers?: Record<string, string> } | 'hang';

/**
 * A partner's webhook endpoint on a loopback address: records every request and every connection,
 * and answers from a script (the next answer of `answers` for each request, then `otherwise`).
 */
export async function startReceiver(options: { host?: string; answers?: ReceiverAnswer[]; otherwise?: ReceiverAnswer } = {}) {
  const received: ReceivedWebhook[] = [];
  const answers = [...(options.answers ?? [])];
  const hanging = new Set<ServerResponse>();
  let connections = 0;
  let otherwise: ReceiverAnswer = options.otherwise ?? 200;
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const answer = answers.shift() ?? otherwise;
      received.push({ headers: request.headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now(), answer });
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
    async close() {
      for (const response of hanging) response.destroy();
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}

export type Receiver = Awaited<ReturnType<typeof startReceiver>>;
