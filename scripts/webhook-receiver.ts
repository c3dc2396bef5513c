// A partner's webhook endpoint on this machine, for trying deliveries with `npm run dev:webhooks`
// (docs/development.md, "Webhooks on this machine"). Listens on 127.0.0.1 (WEBHOOK_RECEIVER_PORT,
// default 9999), answers 204 to every POST, and prints one line per delivery: the event's type,
// subject and data, and whether its Standard Webhooks signature verifies against WEBHOOK_SECRET
// (the `whsec_…` the registration answered) when that is set.
//
//   npx tsx scripts/webhook-receiver.ts
//   WEBHOOK_SECRET=whsec_… npx tsx scripts/webhook-receiver.ts

import { createServer } from 'node:http';
import { Webhook } from 'standardwebhooks';

const port = Number(process.env.WEBHOOK_RECEIVER_PORT ?? 9999);
const secret = process.env.WEBHOOK_SECRET?.trim();
const verifier = secret ? new Webhook(secret) : undefined;

function signature(body: string, headers: Record<string, string>): string {
  if (!verifier) return 'signature not checked (no WEBHOOK_SECRET)';
  try {
    verifier.verify(body, headers);
    return 'signature verified';
  } catch (error) {
    return `signature NOT verified: ${(error as Error).message}`;
  }
}

const server = createServer((request, response) => {
  const chunks: Buffer[] = [];
  request.on('data', (chunk: Buffer) => chunks.push(chunk));
  request.on('end', () => {
    const body = Buffer.concat(chunks).toString('utf8');
    const headers = Object.fromEntries(Object.entries(request.headers).map(([name, value]) => [name, String(value)]));
    let summary = body;
    try {
      const event = JSON.parse(body) as { type?: string; subject?: string; data?: unknown };
      summary = `${event.type} ${event.subject} ${JSON.stringify(event.data)}`;
    } catch {
      // Not JSON: printed as it came.
    }
    process.stdout.write(`delivery ${headers['webhook-id'] ?? '(no webhook-id)'}: ${summary} (${signature(body, headers)})\n`);
    response.writeHead(request.method === 'POST' ? 204 : 405).end();
  });
});

server.listen(port, '127.0.0.1', () => {
  process.stdout.write(`webhook receiver on http://127.0.0.1:${port}/hook (Ctrl-C to stop)\n`);
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => server.close(() => process.exit(0)));
