import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';

// Through require, not `import { STATUS_CODES } from 'node:http'`: an ES import of node:http reads
// every export of the module to build its ES facade, and the lazy WebSocket getters among them load
// Node's whole bundled undici (about 750 KB of source) at every start, for nothing.
const { STATUS_CODES } = createRequire(import.meta.url)('node:http') as typeof import('node:http');

/** A problem written to a socket by hand, where no request object exists. */
interface RawAnswer {
  status: number;
  kind: string;
  title: string;
  detail: string;
}

/**
 * What each parse failure is called and says; `kind` ends the problem type URN. None says that
 * nothing was changed: requests before it on the same connection may have been, and are answered.
 */
const answers = {
  timeout: {
    status: 408,
    kind: 'request-timeout',
    title: 'Request timeout',
    detail: 'The request was not received completely in time, so it was not processed. Send it again.',
  },
  headersTooLarge: {
    status: 431,
    kind: 'request-header-fields-too-large',
    title: 'Request header fields too large',
    detail: 'The request headers are too large, so the request was not processed. Send only the headers the API needs.',
  },
  malformed: {
    status: 400,
    kind: 'validation',
    title: 'Malformed request',
    detail:
      'The request is not valid HTTP/1.1 (request line or headers), so it was not processed. Send it again, well-formed, on a new connection.',
  },
} as const satisfies Record<string, RawAnswer>;

/** CONNECT (a tunnel through a proxy): no resource of this service serves it. */
const connectAnswer: RawAnswer = {
  status: 405,
  kind: 'method-not-allowed',
  title: 'Method not allowed',
  detail: 'CONNECT is not served: this is an API, not a proxy.',
};

function answerFor(code: string | undefined) {
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') return answers.timeout;
  if (code === 'HPE_HEADER_OVERFLOW') return answers.headersTooLarge;
  return answers.malformed;
}

/** The answer as bytes: problem+json with a fresh request id, the usual headers and `Connection: close`. */
function rawProblem(answer: RawAnswer, requestId: string, extraHeaders = ''): string {
  const body = JSON.stringify({
    type: `urn:partner-agent-status:problem:${answer.kind}`,
    title: answer.title,
    status: answer.status,
    detail: answer.detail,
    requestId,
  });
  return (
    `HTTP/1.1 ${answer.status} ${STATUS_CODES[answer.status]}\r\n` +
    'Content-Type: application/problem+json\r\n' +
    `Content-Length: ${Buffer.byteLength(body)}\r\n` +
    `x-request-id: ${requestId}\r\n` +
    'x-content-type-options: nosniff\r\n' +
    'cache-control: no-store\r\n' +
    extraHeaders +
    'Connection: close\r\n' +
    `\r\n${body}`
  );
}

type HttpSocket = Socket & { _httpMessage?: ServerResponse | null };

/** Sockets whose parse failure is being answered: Node reports every later chunk as a failure too. */
const answering = new WeakSet<Socket>();

/**
 * Calls `then` once no response is in flight on the socket: with pipelining, requests parsed before
 * the malformed one are being answered in order (Node hands the socket from one response to the next
 * as each finishes); each completes first.
 */
function afterResponsesInFlight(socket: HttpSocket, then: () => void): void {
  const inFlight = socket._httpMessage;
  if (!inFlight || inFlight.writableFinished || socket.destroyed) {
    then();
    return;
  }
  const next = () => {
    inFlight.off('finish', next).off('close', next);
    // Node assigns the next queued response in its own 'finish' listener: look once it has run.
    setImmediate(() => afterResponsesInFlight(socket, then));
  };
  inFlight.on('finish', next).on('close', next);
}

/**
 * Fastify's `clientErrorHandler`: Node could not parse a request (bad request line or headers, a
 * header section over the limit, or a request not received within the time-out), so there is no
 * request object, no hook runs and the answer is written to the socket by hand. It is the same
 * problem+json as every other error, with a fresh `x-request-id` (the sent one is never read:
 * nothing of the raw bytes is trusted or kept) and `Connection: close`.
 *
 * A connection may still have responses in flight (pipelining: valid requests sent in the same
 * write before the malformed one). Those are processed and answered as usual; the problem follows
 * them, and then the connection closes. Nothing more is read from it.
 *
 * Node puts the bytes it received on the error (`rawPacket`), headers and x-api-key included; the
 * log line holds only the error code and the request id.
 */
export function clientErrorHandlerWith(onAnswered?: (statusCode: number) => void) {
  return function clientErrorHandler(this: FastifyInstance, error: Error & { code?: string }, socket: Socket): void {
    // The peer is gone, or already closing: nothing can be answered.
    if (error.code === 'ECONNRESET' || socket.destroyed || answering.has(socket)) return;
    answering.add(socket);
    const requestId = randomUUID();
    const answer = answerFor(error.code);
    const log = this.log;
    afterResponsesInFlight(socket as HttpSocket, () => {
      // Its access line: what the bytes were is not known, so not even the method.
      log.info({ code: error.code, requestId, statusCode: answer.status }, 'malformed request rejected');
      onAnswered?.(answer.status);
      if (!socket.writable) {
        socket.destroy();
        return;
      }
      socket.end(rawProblem(answer, requestId));
    });
  };
}

/** The handler without a latency sample (tests of the handler alone). */
export const clientErrorHandler = clientErrorHandlerWith();

/**
 * The server's `connect` listener. Without one, Node drops the connection of a CONNECT request with
 * no answer at all; with it, CONNECT gets the 405 problem every other unserved method gets (its
 * target is a host and port, not a path of ours, so `Allow` is empty).
 */
export function connectHandler(onAnswered: (requestId: string, status: number) => void) {
  return (_request: IncomingMessage, socket: Socket): void => {
    const requestId = randomUUID();
    if (socket.writable) socket.end(rawProblem(connectAnswer, requestId, 'Allow: \r\n'));
    else socket.destroy();
    onAnswered(requestId, connectAnswer.status);
  };
}
