// Partner webhooks (`--only=webhooks`, docs/interfaces.md §14): deliveries a second to a receiver in
// this process, and the time from a disable's completion (its event's `time`, the commit) to the
// receiver having the signed call. A service of its own, allowed to reach 127.0.0.1 (the test
// settings); it runs after the main service stopped, so that no other replica's sender, which
// may not reach 127.0.0.1, takes the deliveries.
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { BenchContext, Partner } from '../context.js';
import { phase, seedAgents, startService, stop } from '../context.js';
import { percentile } from '../load.js';

export interface WebhookFigures {
  deliveries: number;
  endpoints: number;
  perSecond: number;
  completions: number;
  completionP50Ms: number;
  completionP99Ms: number;
}

/** A receiver answering 204 at once, noting when each webhook-id first arrived (epoch ms) and its body. */
async function startReceiver() {
  const arrived = new Map<string, { at: number; body: string }>();
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const id = String(request.headers['webhook-id']);
      if (!arrived.has(id)) arrived.set(id, { at: Date.now(), body: Buffer.concat(chunks).toString('utf8') });
      response.writeHead(204).end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return {
    url: (path: string) => `http://127.0.0.1:${port}/${path}`,
    arrived,
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

async function register(baseUrl: string, partner: Partner, url: string, eventTypes?: string[]): Promise<string> {
  const response = await fetch(`${baseUrl}/partner/webhook-endpoints`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': partner.key },
    body: JSON.stringify({ url, ...(eventTypes ? { eventTypes } : {}) }),
  });
  const body = (await response.json()) as { id?: string };
  if (response.status !== 201 || !body.id) throw new Error(`registering an endpoint answered ${response.status}`);
  return body.id;
}

async function until(check: () => boolean, timeoutMs: number, what: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(what());
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export async function webhooksPhase(ctx: BenchContext): Promise<void> {
  await phase(ctx, 'webhooks', async () => {
    const { quick } = ctx.options;
    const receiver = await startReceiver();
    const service = await startService(ctx, 'webhooks', { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32' });
    const baseUrl = new URL(service.statusUrl).origin;
    try {
      // Deliveries a second: deliveries written as the outbox's fan-out writes them, spread over
      // 4 networks of 2 endpoints each, so the per-network and per-endpoint bounds are not the limit.
      const networks = ctx.disablers.slice(4, 8);
      const endpoints: { id: string; networkId: string }[] = [];
      for (const [n, partner] of networks.entries()) {
        for (let e = 0; e < 2; e += 1) {
          endpoints.push({
            id: await register(baseUrl, partner, receiver.url(`n${n}e${e}`), ['agent.enabled']),
            networkId: partner.networkId,
          });
        }
      }
      const count = quick ? 400 : 5_000;
      const started = Date.now();
      await ctx.db.query(
        `INSERT INTO webhook_deliveries (endpoint_id, network_id, event_id, event_type, body)
         SELECT ep.id, ep.network_id, gen_random_uuid(), 'agent.enabled', '{"bench":true}'
         FROM generate_series(0, $3::int - 1) AS i
         JOIN unnest($1::uuid[], $2::uuid[]) WITH ORDINALITY AS ep(id, network_id, n) ON ep.n = 1 + i % cardinality($1::uuid[])`,
        [endpoints.map((e) => e.id), endpoints.map((e) => e.networkId), count],
      );
      await until(
        () => receiver.arrived.size >= count,
        quick ? 60_000 : 300_000,
        () => `${receiver.arrived.size} of ${count} deliveries arrived`,
      );
      const seconds = (Date.now() - started) / 1000;
      // Each attempt's record follows its answer: wait for the last ones.
      let succeeded = 0;
      const deadline = Date.now() + 10_000;
      while (succeeded < count && Date.now() < deadline) {
        const { rows } = await ctx.db.query("SELECT count(*)::int AS ok FROM webhook_deliveries WHERE state = 'succeeded'");
        succeeded = rows[0].ok;
        if (succeeded < count) await new Promise((resolve) => setTimeout(resolve, 50));
      }
      if (succeeded < count) throw new Error(`${succeeded} of ${count} deliveries recorded as succeeded`);

      // Completion to delivery: disables one after another, each completion's event signed and
      // sent to an endpoint that takes completions only.
      const completions = quick ? 20 : 200;
      const partner = ctx.disablers[8]!;
      await register(baseUrl, partner, receiver.url('completions'), ['agent.disable.completed']);
      const agents = await seedAgents(ctx, [partner], completions, 1);
      receiver.arrived.clear();
      for (const agentId of agents) {
        const response = await fetch(service.statusUrl, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-api-key': partner.key },
          body: JSON.stringify({ agentId, enabled: false }),
        });
        await response.arrayBuffer();
        if (response.status !== 200) throw new Error(`a disable answered ${response.status}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await until(
        () => receiver.arrived.size >= completions,
        30_000,
        () => `${receiver.arrived.size} of ${completions} completions arrived`,
      );
      const latencies = [...receiver.arrived.values()]
        .map(({ at, body }) => at - Date.parse((JSON.parse(body) as { time: string }).time))
        .sort((a, b) => a - b);
      const figures: WebhookFigures = {
        deliveries: count,
        endpoints: endpoints.length,
        perSecond: Math.round(count / seconds),
        completions,
        completionP50Ms: percentile(latencies, 50),
        completionP99Ms: percentile(latencies, 99),
      };
      ctx.results.webhooks = figures;
      console.log(
        `  webhooks: ${figures.perSecond} deliveries/s (${count} to ${endpoints.length} endpoints); completion to delivery p50 ${figures.completionP50Ms} ms, p99 ${figures.completionP99Ms} ms`,
      );
    } finally {
      await stop(ctx, service);
      receiver.close();
    }
  });
}
