import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';

/**
 * A TCP proxy between the service and a real dependency, so that a test can make that dependency
 * fail for the service alone, without touching the server other tests use:
 * - `cut()` closes every connection and refuses new ones until `restore()`;
 * - `hold(marker)` black-holes connections: once a client's bytes contain `marker` (for PostgreSQL,
 *   the name of a prepared statement, which travels in every Parse and Bind), that connection
 *   stops forwarding in both directions but stays open, as behind a failover without a reset or a
 *   proxy that hung. `arm()` holds one more such connection; `held()` counts those held so far.
 *   With `answers: 'lost'` the bytes carrying the marker still reach the server (the statement runs
 *   and commits) and only what comes back from then on is black-holed: an answer lost after the
 *   commit. With `answers: 'reset'` those bytes reach the server too, and the first answer bytes
 *   that come back reset the client's connection (TCP RST) instead of reaching it: an HTTP answer
 *   lost to a reset after the server committed and answered;
 * - `stall()` black-holes every connection open now (no byte passes either way, none is closed),
 *   as a link that died without a reset; connections made later pass as before;
 * - `delay(ms)` holds every answer (server to client) that long before passing it on, in order, as
 *   a slow link or a stalled replica would; `delay(0)` ends it for what arrives from then on;
 * - `retarget(port)` sends new connections to another server on the same host while those already
 *   open stay with the old one: an address that switched (a failover) with the old server still
 *   reachable.
 */
export async function startTcpProxy(
  target: { host: string; port: number },
  /** `also`: a second string the same bytes must hold (a statement's name and one of its parameters). */
  hold?: { marker: string; also?: string; count: number; answers?: 'lost' | 'reset' },
) {
  const sockets = new Set<Socket>();
  let cut = false;
  let toHold = hold?.count ?? 0;
  let held = 0;
  let answerDelayMs = 0;
  let targetPort = target.port;
  const stalls = new Set<() => void>();
  const server = createServer((client) => {
    if (cut) return client.destroy();
    const upstream = connect(targetPort, target.host);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => socket.destroy());
    }
    let blackholed = false;
    let resetOnAnswer = false;
    const stall = () => {
      blackholed = true;
    };
    stalls.add(stall);
    client.on('close', () => stalls.delete(stall));
    client.on('data', (chunk: Buffer) => {
      if (!blackholed && !resetOnAnswer && hold && toHold > 0 && chunk.includes(hold.marker) && chunk.includes(hold.also ?? '')) {
        toHold -= 1;
        held += 1;
        if (hold.answers === 'reset') resetOnAnswer = true;
        else blackholed = true;
        if (hold.answers === 'lost') upstream.write(chunk);
      }
      if (!blackholed) upstream.write(chunk);
    });
    // Answers leave in the order they came, each no earlier than its arrival plus the delay.
    let lastRelease = 0;
    upstream.on('data', (chunk: Buffer) => {
      if (resetOnAnswer) {
        client.resetAndDestroy();
        upstream.destroy();
        return;
      }
      if (blackholed) return;
      if (answerDelayMs === 0 && lastRelease <= Date.now()) return void client.write(chunk);
      lastRelease = Math.max(lastRelease, Date.now() + answerDelayMs);
      setTimeout(() => {
        if (!blackholed && !client.destroyed) client.write(chunk);
      }, lastRelease - Date.now());
    });
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    cut() {
      cut = true;
      for (const socket of sockets) socket.destroy();
    },
    restore() {
      cut = false;
    },
    stall() {
      for (const stall of stalls) stall();
    },
    /** Connections held so far. */
    held: () => held,
    delay(ms: number) {
      answerDelayMs = ms;
    },
    /** New connections go to this port from now on; open ones stay where they are. */
    retarget(port: number) {
      targetPort = port;
    },
    /** Holds the next connection that carries the marker too. */
    arm() {
      toHold += 1;
    },
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
