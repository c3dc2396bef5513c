import { Type, type TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify from 'fastify';

/**
 * A stand-in for the spend-management API (docs/interfaces.md §6) for npm run dev, the e2e suite,
 * the dev cluster and the tests. It pauses what it is asked to, remembers it, and can be switched
 * to fail, hang or answer slowly through its control routes under /_simulator. It holds its
 * idempotency keys strictly by default, as the IETF Idempotency-Key draft's servers do: a key that
 * comes back with other campaigns (or the same ones in another order) than its first use answers 422
 * and pauses nothing.
 */
export type SimulatorMode = 'ok' | 'fail' | 'hang' | 'slow';

export interface SimulatorRequest {
  campaignIds: string[];
  idempotencyKey: string;
  /**
   * A key seen before: the same call sent again (its sender did not learn its outcome). A key
   * answered before gets its first answer again and pauses nothing anew; one that was only seen
   * (the simulator failed or hung on it) is served now.
   */
  replay: boolean;
  traceparent: string | undefined;
  /** The W3C baggage header, when a caller forwards one (the service must not). */
  baggage: string | undefined;
  at: string;
  /** Answered 422: the key came back with other campaigns than its first use (strict keys). */
  keyReused?: true;
  /** The status answered (undefined while it hangs, or when it never answered). */
  status?: number;
}

const uuid = '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';
const PauseBody = Type.Object(
  {
    campaignIds: Type.Array(Type.String({ pattern: uuid }), { minItems: 1, maxItems: 100 }),
    reason: Type.Literal('agent-disabled'),
  },
  { additionalProperties: false },
);
const ModeBody = Type.Object(
  {
    mode: Type.Union([Type.Literal('ok'), Type.Literal('fail'), Type.Literal('hang'), Type.Literal('slow')]),
    delayMs: Type.Optional(Type.Integer({ minimum: 0, maximum: 60_000 })),
    failStatus: Type.Optional(Type.Integer({ minimum: 400, maximum: 599 })),
    /** With mode "fail": answer this many more pauses normally first. */
    failAfter: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000 })),
  },
  { additionalProperties: false },
);

export interface SimulatorOptions {
  /** When set, every pause must carry `authorization: Bearer <token>`. */
  token?: string;
  logger?: boolean;
  /** Requests kept for read-back (the newest). */
  keepRequests?: number;
  /** 422 for a key that comes back with other campaigns than its first use (default true). */
  strictKeys?: boolean;
}

export function createSpendSimulator(options: SimulatorOptions = {}) {
  const app = Fastify({ logger: options.logger ?? false, forceCloseConnections: true }).withTypeProvider<TypeBoxTypeProvider>();
  const keep = options.keepRequests ?? 1_000;
  const paused = new Set<string>();
  let requests: SimulatorRequest[] = [];
  // How it answers, as the last PUT /_simulator/mode (or setMode) set it.
  const behaviour: { mode: SimulatorMode; delayMs: number; failStatus: number; failAfter: number } = {
    mode: 'ok',
    delayMs: 1_000,
    failStatus: 503,
    failAfter: 0,
  };
  const setBehaviour = (mode: SimulatorMode, settings: { delayMs?: number; failStatus?: number; failAfter?: number }) => {
    Object.assign(behaviour, {
      mode,
      delayMs: settings.delayMs ?? behaviour.delayMs,
      failStatus: settings.failStatus ?? behaviour.failStatus,
      failAfter: settings.failAfter ?? 0,
    });
  };
  /** Campaigns the simulator leaves out of `paused` (an answer about single campaigns). */
  const refused = new Set<string>();
  /**
   * The answers given, by idempotency key (the newest `keep × 100`): a call sent again with its key
   * gets its first answer again and pauses nothing anew, as the IETF Idempotency-Key draft has it.
   */
  const answered = new Map<string, string[]>();
  /** Every key received (the newest `keep × 100`), answered or not, with the campaigns of its first use. */
  const seen = new Map<string, string>();
  const strictKeys = options.strictKeys ?? true;
  /** Requests answered 422 because their key came back with other campaigns. */
  let keysReused = 0;

  app.post('/v1/spending-periods/pause', { schema: { body: PauseBody } }, async (request, reply) => {
    if (options.token && request.headers.authorization !== `Bearer ${options.token}`) {
      return reply.code(401).send({ error: 'unauthorized' });
    }
    const idempotencyKey = request.headers['idempotency-key'];
    if (typeof idempotencyKey !== 'string' || idempotencyKey === '') {
      return reply.code(400).send({ error: 'idempotency-key header is required' });
    }
    const { traceparent, baggage } = request.headers;
    const earlier = answered.get(idempotencyKey);
    const firstUse = seen.get(idempotencyKey);
    const firstTime = firstUse === undefined;
    const campaigns = request.body.campaignIds.join(',');
    const reused = strictKeys && !firstTime && firstUse !== campaigns;
    const entry: SimulatorRequest = {
      campaignIds: request.body.campaignIds,
      idempotencyKey,
      replay: !firstTime,
      traceparent: typeof traceparent === 'string' ? traceparent : undefined,
      baggage: typeof baggage === 'string' ? baggage : undefined,
      at: new Date().toISOString(),
      ...(reused ? { keyReused: true as const } : {}),
    };
    requests.push(entry);
    if (requests.length > keep) requests = requests.slice(-keep);
    if (reused) {
      keysReused += 1;
      entry.status = 422;
      return reply.code(422).send({ error: 'idempotency key reused with other campaigns' });
    }
    if (firstTime) {
      seen.set(idempotencyKey, campaigns);
      if (seen.size > keep * 100) seen.delete(seen.keys().next().value!);
    }

    if (behaviour.mode === 'fail' && behaviour.failAfter > 0) behaviour.failAfter -= 1;
    else if (behaviour.mode === 'fail') {
      entry.status = behaviour.failStatus;
      return reply.code(behaviour.failStatus).send({ error: 'simulated failure' });
    }
    if (behaviour.mode === 'hang') return new Promise<never>(() => undefined); // ends when the server closes
    if (behaviour.mode === 'slow') await new Promise((resolve) => setTimeout(resolve, behaviour.delayMs));
    entry.status = 200;
    if (earlier) return { paused: earlier };
    const accepted = request.body.campaignIds.filter((id) => !refused.has(id));
    for (const id of accepted) paused.add(id);
    answered.set(idempotencyKey, accepted);
    if (answered.size > keep * 100) answered.delete(answered.keys().next().value!);
    return { paused: accepted };
  });

  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/_simulator/state', async () => ({
    ...behaviour,
    pausedCount: paused.size,
    requestCount: requests.length,
    strictKeys,
    keysReused,
  }));
  app.put('/_simulator/mode', { schema: { body: ModeBody } }, async (request) => {
    setBehaviour(request.body.mode, request.body);
    return { ...behaviour };
  });
  app.get('/_simulator/paused/:campaignId', async (request) => {
    const { campaignId } = request.params as { campaignId: string };
    return { campaignId, paused: paused.has(campaignId) };
  });
  app.post(
    '/_simulator/paused/query',
    { schema: { body: Type.Object({ campaignIds: Type.Array(Type.String(), { maxItems: 10_000 }) }) } },
    async (request) => ({
      paused: request.body.campaignIds.filter((id) => paused.has(id)),
    }),
  );
  app.get('/_simulator/requests', async () => ({ requests }));
  app.put(
    '/_simulator/refused',
    { schema: { body: Type.Object({ campaignIds: Type.Array(Type.String(), { maxItems: 10_000 }) }) } },
    async (request) => {
      refused.clear();
      for (const id of request.body.campaignIds) refused.add(id);
      return { refused: [...refused] };
    },
  );
  app.post('/_simulator/reset', async () => {
    paused.clear();
    refused.clear();
    answered.clear();
    seen.clear();
    keysReused = 0;
    requests = [];
    Object.assign(behaviour, { mode: 'ok', delayMs: 1_000, failStatus: 503, failAfter: 0 });
    return { ...behaviour };
  });

  return Object.assign(app, {
    simulator: {
      isPaused: (id: string) => paused.has(id),
      requests: () => requests,
      /** Requests answered 422 since the start (or the last reset): a key that came back with other campaigns. */
      keysReused: () => keysReused,
      /** Leaves these campaigns out of `paused` from now on (none: every campaign is paused again). */
      refuse(campaignIds: readonly string[]) {
        refused.clear();
        for (const id of campaignIds) refused.add(id);
      },
      setMode(next: SimulatorMode, settings: { delayMs?: number; failStatus?: number; failAfter?: number } = {}) {
        setBehaviour(next, settings);
      },
    },
  });
}

export type SpendSimulator = ReturnType<typeof createSpendSimulator>;
