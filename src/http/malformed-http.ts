import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';

// Through require, not `import { STATUS_CODES } from 'node:http'`: an ES import of node:http reads
// every export of the module to build its ES facade, and the lazy WebSocket getters among them load
// Node's whole bundled undici (about 750 KB of source) at every start, for nothing.
const { STATUS_CODES } = createRequire(import.meta.url)('node:http') as typeof import('node:http');

/** What each parse failure is called and says; `kind` ends the problem type URN. */
const answers = {
  timeout: {
    status: 408,
    kind: 'request-timeout',
    title: 'Request timeout',
    detail: 'The request was not received completely in time. Send it again.',
  },
  headersTooLarge: {
    status: 431,
    kind: 'request-header-fields-too-large',
    title: 'Request header fields too large',
    detail: 'The request headers are too large. Send only the headers the API needs.',
  },
  malformed: {
    status: 400,
    kind: 'validation',
    title: 'Malformed request',
    detail: 'The request is not valid HTTP/1.1 (request line or headers). Nothing was changed.',
  },
} as const;

function answerFor(code: string | undefined) {
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') return answers.timeout;
  if (code === 'HPE_HEADER_OVERFLOW') return answers.headersTooLarge;
  return answers.malformed;
}

/**
 * Fastify's `clientErrorHandler`: Node could not parse a request (bad request line or headers, a
 * header section over the limit, or a request not received within the time-out), so there is no
 * request object, no hook runs and the answer is written to the socket by hand. It is the same
 * problem+json as every other error, with a fresh `x-request-id` (the sent one is never read:
 * nothing of the raw bytes is trusted or kept) and `Connection: close`.
 *
 * Node puts the bytes it received on the error (`rawPacket`), headers and x-api-key included; the
 * log line holds only the error code and the request id.
 */
export function clientErrorHandler(this: FastifyInstance, error: Error & { code?: string }, socket: Socket): void {
  // The peer is gone, or already closing: nothing can be answered.
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  const requestId = randomUUID();
  const answer = answerFor(error.code);
  this.log.info({ code: error.code, requestId, statusCode: answer.status }, 'malformed request rejected');
  // A response already under way on this socket must not be corrupted by a second one.
  if (!socket.writable || inFlight?.headersSent) {
    socket.destroy();
    return;
  }
  const body = JSON.stringify({
    type: `urn:partner-agent-status:problem:${answer.kind}`,
    title: answer.title,
    status: answer.status,
    detail: answer.detail,
    requestId,
  });
  socket.end(
    `HTTP/1.1 ${answer.status} ${STATUS_CODES[answer.status]}\r\n` +
      'Content-Type: application/problem+json\r\n' +
      `Content-Length: ${Buffer.byteLength(body)}\r\n` +
      `x-request-id: ${requestId}\r\n` +
      'x-content-type-options: nosniff\r\n' +
      'cache-control: no-store\r\n' +
      'Connection: close\r\n' +
      `\r\n${body}`,
  );
}
