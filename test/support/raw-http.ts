import { once } from 'node:events';
import { connect } from 'node:net';

/**
 * Writes raw bytes to a server (a request no HTTP client would send) and reads until the server
 * closes the connection. `keepOpen` leaves the writing side open, for a request that never ends.
 */
export async function rawExchange(port: number, bytes: string, opts: { keepOpen?: boolean } = {}): Promise<string> {
  const socket = connect(port, '127.0.0.1');
  await once(socket, 'connect');
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  socket.write(bytes);
  if (!opts.keepOpen) socket.end();
  await once(socket, 'close');
  return Buffer.concat(chunks).toString('latin1');
}

/** An HTTP/1.1 response as written on the wire: status line, headers (lower-cased names), body. */
export function parseRawResponse(raw: string) {
  const [head = '', body = ''] = raw.split('\r\n\r\n');
  const [statusLine = '', ...headerLines] = head.split('\r\n');
  const headers = Object.fromEntries(
    headerLines.map((line) => {
      const at = line.indexOf(':');
      return [line.slice(0, at).toLowerCase(), line.slice(at + 1).trim()];
    }),
  );
  return { statusLine, status: Number(statusLine.split(' ')[1]), headers, body };
}

/** Every HTTP/1.1 response on the wire, in order: each read by its Content-Length (the service always sends one). */
export function parseRawResponses(raw: string) {
  const responses: Array<ReturnType<typeof parseRawResponse>> = [];
  let rest = raw;
  while (rest.length > 0) {
    const headEnd = rest.indexOf('\r\n\r\n');
    if (headEnd < 0) break;
    const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(rest.slice(0, headEnd))?.[1] ?? 0);
    const end = headEnd + 4 + length;
    responses.push(parseRawResponse(rest.slice(0, end)));
    rest = rest.slice(end);
  }
  return responses;
}
