import { createSocket } from 'node:dgram';
import { once } from 'node:events';

/**
 * A name server on 127.0.0.1 (UDP) for the webhook resolver (WEBHOOK_DNS_SERVERS): it answers the
 * A queries of the names it was given, an empty answer to their other queries, and holds every
 * query of any other name unanswered (a partner's name server that does not answer) until
 * `release`, which answers them, and those that come later, with no address. A test can thus keep
 * lookups under way for as long as it looks, and end them when it is done. Answers have a TTL of 0:
 * nothing is cached, each lookup asks again.
 */
export type DnsServer = Awaited<ReturnType<typeof startDnsServer>>;

export async function startDnsServer() {
  const names = new Map<string, string>();
  let queries = 0;
  let unanswered = 0;
  let holding = true;
  const held: Array<{ query: Buffer; end: number; port: number; address: string }> = [];
  const socket = createSocket('udp4');
  socket.on('message', (message, peer) => {
    queries += 1;
    const question = readQuestion(message);
    if (!question) return;
    const address = names.get(question.name.toLowerCase());
    if (address === undefined) {
      unanswered += 1;
      if (holding) held.push({ query: message, end: question.end, port: peer.port, address: peer.address });
      else socket.send(answer(message, question.end, undefined), peer.port, peer.address);
      return;
    }
    socket.send(answer(message, question.end, question.type === 1 ? address : undefined), peer.port, peer.address);
  });
  socket.bind(0, '127.0.0.1');
  await once(socket, 'listening');
  const { port } = socket.address();
  return {
    /** The WEBHOOK_DNS_SERVERS value that points at this server. */
    server: `127.0.0.1:${port}`,
    /** Answers `name` with `address` (IPv4) from now on. */
    set(name: string, address: string) {
      names.set(name.toLowerCase(), address);
    },
    /** Stops answering `name`. */
    forget(name: string) {
      names.delete(name.toLowerCase());
    },
    get queries() {
      return queries;
    },
    /** Queries of unknown names received, held or since answered by `release`. */
    get unanswered() {
      return unanswered;
    },
    /** Queries of unknown names held unanswered now. */
    get held() {
      return held.length;
    },
    /** Answers the queries held, and from now on unknown names at once, with no address. */
    release() {
      holding = false;
      for (const { query, end, port, address } of held.splice(0)) socket.send(answer(query, end, undefined), port, address);
    },
    /** Holds the queries of unknown names again (as at the start). */
    hold() {
      holding = true;
    },
    async close() {
      held.length = 0;
      socket.close();
      await once(socket, 'close');
    },
  };
}

/** The question of a query: its name, type and where it ends in the message. */
function readQuestion(message: Buffer): { name: string; type: number; end: number } | undefined {
  if (message.length < 17) return undefined;
  const labels: string[] = [];
  let at = 12;
  while (at < message.length && message[at] !== 0) {
    const length = message[at]!;
    labels.push(message.subarray(at + 1, at + 1 + length).toString('ascii'));
    at += 1 + length;
  }
  at += 1;
  if (at + 4 > message.length) return undefined;
  return { name: labels.join('.'), type: message.readUInt16BE(at), end: at + 4 };
}

/** The response to `query`: its question, and one A record of `address` when given (else no record). */
function answer(query: Buffer, questionEnd: number, address: string | undefined): Buffer {
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2); // the query's id
  header.writeUInt16BE(0x8180, 2); // a response, recursion desired and available, no error
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(address === undefined ? 0 : 1, 6);
  const question = query.subarray(12, questionEnd);
  if (address === undefined) return Buffer.concat([header, question]);
  const record = Buffer.alloc(16);
  record.writeUInt16BE(0xc00c, 0); // the name: a pointer to the question's
  record.writeUInt16BE(1, 2); // A
  record.writeUInt16BE(1, 4); // IN
  record.writeUInt32BE(0, 6); // TTL 0
  record.writeUInt16BE(4, 10);
  for (const [i, octet] of address.split('.').entries()) record[12 + i] = Number(octet);
  return Buffer.concat([header, question, record]);
}
