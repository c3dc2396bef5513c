import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';

/**
 * A TCP proxy that black-holes chosen connections: once a client's bytes contain `marker` (for
 * PostgreSQL, the name of a prepared statement, which travels in every Parse and Bind), that
 * connection stops forwarding in both directions but stays open, as behind a failover without a
 * reset or a proxy that hung. Only the first `count` such connections are held; later ones pass.
 */
export async function startBlackholeProxy(target: { host: string; port: number }, marker: string, count = 1) {
  const sockets = new Set<Socket>();
  let left = count;
  let held = 0;
  const server = createServer((client) => {
    const upstream = connect(target.port, target.host);
    let blackholed = false;
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => socket.destroy());
    }
    client.on('data', (chunk: Buffer) => {
      if (!blackholed && left > 0 && chunk.includes(marker)) {
        left -= 1;
        held += 1;
        blackholed = true;
      }
      if (!blackholed) upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (!blackholed) client.write(chunk);
    });
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return {
    port,
    /** Connections held so far. */
    held: () => held,
    /** Holds the next connection that carries the marker too. */
    arm: () => {
      left += 1;
    },
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
