// A local OTLP/HTTP trace endpoint for the traced enable. Unlike test/support/otlp-receiver.ts it
// neither decodes nor keeps spans: it runs in the load generator's process, so it only drains each
// export and answers 200, counting exports and bytes to prove that spans were really sent. That
// lets the service use its production encoding (OTLP/HTTP protobuf, the SDK's default).
import { once } from 'node:events';
import { createServer } from 'node:http';

export async function startOtlpSink() {
  const received = { exports: 0, bytes: 0 };
  const server = createServer((request, response) => {
    request.on('data', (chunk: Buffer) => {
      received.bytes += chunk.length;
    });
    request.on('end', () => {
      if (request.url === '/v1/traces') received.exports += 1;
      response.writeHead(200, { 'content-type': request.headers['content-type'] ?? 'application/x-protobuf' }).end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return {
    endpoint: `http://127.0.0.1:${port}`,
    received,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
