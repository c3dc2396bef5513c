import { type EventFilter, type ListenedEvent, type ListenOptions, listenToEvents } from './events.js';
import { type ApiVersion, newestApiVersion, type operations, type paths } from './generated/versions.js';
import { type Answer, type Call, createTransport, type DeprecationWarning, defaultRetry, type RetryOptions, sleep } from './transport.js';

/** The JSON body of an operation's answer with `status`, as the OpenAPI document describes it. */
export type ResponseBody<Op extends keyof operations, Status extends number> =
  operations[Op]['responses'] extends Record<Status, { content: { 'application/json': infer Body } }> ? Body : never;

/** The JSON body an operation takes. */
export type RequestBody<Op extends keyof operations> = operations[Op] extends {
  requestBody?: { content: { 'application/json': infer Body } };
}
  ? Body
  : never;

export type AgentStatus = ResponseBody<'getAgentStatus', 200>;
export type StatusChangeRequest = RequestBody<'setAgentStatus'>;
export type StatusChangePage = ResponseBody<'listAgentStatusChanges', 200>;
export type StatusChange = StatusChangePage['changes'][number];
export type WebhookEndpointRequest = RequestBody<'createWebhookEndpoint'>;
export type CreatedWebhookEndpoint = ResponseBody<'createWebhookEndpoint', 201>;
export type WebhookEndpoint = ResponseBody<'listWebhookEndpoints', 200>['endpoints'][number];
export type RotatedWebhookSecret = ResponseBody<'rotateWebhookSecret', 200>;
export type WebhookDelivery = ResponseBody<'listWebhookDeliveries', 200>['deliveries'][number];
export type RetriedWebhookDelivery = ResponseBody<'retryWebhookDelivery', 202>;
export type StatusBatchRequest = RequestBody<'setAgentStatusBatch'>;
export type StatusBatch = ResponseBody<'setAgentStatusBatch', 200>;
export type StatusBatchResult = StatusBatch['results'][number];
export type EventPage = ResponseBody<'listEvents', 200>;

/**
 * The answer to a bulk change: 200 with one result per change in request order (each the status and
 * body its single call would have answered: 200, 202, 404, 409 or 500), or 202 under respond-async
 * once every change is recorded (`batchId` and `location` are where to read the results).
 */
export type StatusBatchAnswer = (
  | { status: 200; data: StatusBatch }
  | { status: 202; data: ResponseBody<'setAgentStatusBatch', 202>; location: string | undefined }
) & { batchId: string; replayed: boolean; requestId: string | undefined; headers: Headers };

/** Where a page of events starts and what it holds. */
export type EventPageOptions = { after?: string; limit?: number } & EventFilter & RequestOptions;

export interface StatusBatchOptions extends RequestOptions {
  /** The key the whole batch is recognised by for 24 hours; a new UUID when not given. Kept across the client's retries. */
  idempotencyKey?: string;
  /** RFC 7240 `respond-async`: answer 202 once every change is recorded. */
  respondAsync?: boolean;
}

/**
 * The answer to a status change: 200 with the change made (or found already made), or 202 while a
 * recorded disable is still pausing campaigns (the body is the agent's status; `location` is where to
 * follow it). `replayed` is true when the service answered from an earlier request with the same
 * Idempotency-Key: the change was made once, by that request.
 */
export type StatusChangeAnswer = (
  | { status: 200; data: ResponseBody<'setAgentStatus', 200> }
  | { status: 202; data: ResponseBody<'setAgentStatus', 202>; location: string | undefined }
) & { replayed: boolean; requestId: string | undefined; headers: Headers };

export interface RequestOptions {
  signal?: AbortSignal;
  /** Sent as x-request-id, to find the request in the service's logs. */
  requestId?: string;
}

export interface StatusChangeOptions extends RequestOptions {
  /** The ETag of a status read: the change is made only if the agent has not changed since (else a 412). */
  ifMatch?: string;
  /** The key repeats are recognised by (24 hours); a new UUID when not given. Kept across the client's retries. */
  idempotencyKey?: string;
  /** RFC 7240 `respond-async` (disables only): answer 202 once recorded, or after `waitSeconds`. */
  respondAsync?: boolean | { waitSeconds: number };
}

export interface PartnerClientOptions {
  /** Where the API is, e.g. https://partner-api.example.com (no trailing /partner). */
  baseUrl: string;
  /** The network's API key. Keep it on a server: never ship it in a browser bundle or a mobile app. */
  apiKey: string;
  /** The API version every request is pinned to (Partner-Api-Version); the newest this client knows by default. */
  apiVersion?: ApiVersion;
  retry?: RetryOptions;
  /** Called for every answer that says the pinned version is deprecated; by default one console.warn per client. */
  onWarning?: (warning: DeprecationWarning) => void;
  /** A fetch of your own (a proxy agent, instrumentation); the global fetch by default. */
  fetch?: typeof fetch;
}

/** `{name}` segments of a route of the API filled in, each percent-encoded; a route that no longer exists does not compile. */
function route<P extends keyof paths>(
  template: P,
  parameters: Record<string, string> = {},
  query: Record<string, string | number | undefined> = {},
) {
  const path = (template as string).replace(/\{(\w+)\}/g, (_, name: string) => {
    const value = parameters[name];
    if (value === undefined) throw new TypeError(`${name} is required`);
    return encodeURIComponent(value);
  });
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) if (value !== undefined) search.set(name, String(value));
  return search.size > 0 ? `${path}?${search}` : path;
}

function requestHeaders(options: RequestOptions | undefined): Record<string, string> {
  return options?.requestId === undefined ? {} : { 'x-request-id': options.requestId };
}

function preferOf(respondAsync: StatusChangeOptions['respondAsync']): Record<string, string> {
  if (!respondAsync) return {};
  return { prefer: respondAsync === true ? 'respond-async' : `respond-async, wait=${Math.max(0, Math.floor(respondAsync.waitSeconds))}` };
}

/** The headers of a change or a batch: request id, Idempotency-Key when given, Prefer. */
function changeHeaders(options: StatusChangeOptions | StatusBatchOptions | undefined): Record<string, string> {
  return {
    ...requestHeaders(options),
    ...(options?.idempotencyKey === undefined ? {} : { 'idempotency-key': options.idempotencyKey }),
    ...preferOf(options?.respondAsync),
  };
}

/** What every change's answer says besides its body: a replay, the request id, `Location` (on a 202). */
function replayOf(answer: Answer<unknown>) {
  return {
    replayed: answer.headers.get('idempotent-replayed') === 'true',
    requestId: answer.requestId,
    headers: answer.headers,
    location: answer.headers.get('location') ?? undefined,
  };
}

function defaultWarning() {
  let warned = false;
  return (warning: DeprecationWarning) => {
    if (warned) return;
    warned = true;
    const sunset = warning.sunsetAt ? `; it stops working at ${warning.sunsetAt.toISOString()}` : '';
    console.warn(`partner API version ${warning.apiVersion} is deprecated${sunset}${warning.link ? ` (${warning.link})` : ''}`);
  };
}

/**
 * A client of the Partner Agent Status API for one network's key. Every method resolves with a 2xx
 * answer and rejects with PartnerApiError (another answer) or PartnerNetworkError (none).
 */
export function createPartnerClient(options: PartnerClientOptions) {
  if (!options.apiKey) throw new TypeError('apiKey is required');
  const apiVersion = options.apiVersion ?? newestApiVersion;
  const transport = createTransport({
    baseUrl: options.baseUrl,
    apiKey: options.apiKey,
    apiVersion,
    retry: { ...defaultRetry, ...options.retry },
    fetch: options.fetch ?? ((input, init) => globalThis.fetch(input, init)),
    onWarning: options.onWarning ?? defaultWarning(),
    sleep,
  });
  const send = <T>(call: Call): Promise<Answer<T>> => transport.send<T>(call);
  /** A GET, POST or DELETE with the caller's request id and signal; `repeatable` as Call's repeatableAfterNetworkError. */
  const call = <T>(method: Call['method'], path: string, repeatable: boolean, requestOptions: RequestOptions | undefined, body?: unknown) =>
    send<T>({
      method,
      path,
      body,
      headers: requestHeaders(requestOptions),
      repeatableAfterNetworkError: repeatable,
      signal: requestOptions?.signal,
    });
  const read = <T>(path: string, requestOptions: RequestOptions | undefined) => call<T>('GET', path, true, requestOptions);

  const client = {
    apiVersion,

    /** The agent's approval and campaign counts; `etag` is what `setAgentStatus`'s `ifMatch` takes. */
    async getAgentStatus(agentId: string, requestOptions?: RequestOptions) {
      const answer = await read<AgentStatus>(route('/partner/agents/{agentId}/status', { agentId }), requestOptions);
      return { ...answer, etag: answer.headers.get('etag') ?? undefined };
    },

    /**
     * Disables (`enabled: false`, pausing the agent's campaigns) or enables an agent. Repeated after a
     * lost answer with the same Idempotency-Key, so the service answers as the first change, never
     * making a second one.
     */
    async setAgentStatus(change: StatusChangeRequest, changeOptions?: StatusChangeOptions): Promise<StatusChangeAnswer> {
      const answer = await send<StatusChangeAnswer['data']>({
        method: 'POST',
        path: route('/partner/agents/status'),
        body: { agentId: change.agentId, enabled: change.enabled },
        headers: {
          ...changeHeaders(changeOptions),
          ...(changeOptions?.ifMatch === undefined ? {} : { 'if-match': changeOptions.ifMatch }),
        },
        repeatableAfterNetworkError: true,
        signal: changeOptions?.signal,
      });
      const { location, ...common } = replayOf(answer);
      return answer.status === 202
        ? { ...common, status: 202, data: answer.data as ResponseBody<'setAgentStatus', 202>, location }
        : { ...common, status: 200, data: answer.data as ResponseBody<'setAgentStatus', 200> };
    },

    /** One page of the agent's status changes, newest first; pass its `nextBefore` as `before` for the next. */
    async listStatusChanges(agentId: string, page: { limit?: number; before?: number } & RequestOptions = {}) {
      return read<StatusChangePage>(
        route('/partner/agents/{agentId}/status-changes', { agentId }, { limit: page.limit, before: page.before }),
        page,
      );
    },

    /** Every page of the agent's status changes, newest first, fetched as the loop asks for them. */
    async *statusChangePages(agentId: string, pages: { limit?: number } & RequestOptions = {}): AsyncGenerator<StatusChangePage> {
      let before: number | undefined;
      do {
        const { data } = await client.listStatusChanges(agentId, { ...pages, before });
        yield data;
        before = data.nextBefore ?? undefined;
      } while (before !== undefined);
    },

    /**
     * Up to 1,000 changes in one request (docs/interfaces.md §16). Repeated after a lost answer with
     * the same Idempotency-Key, so the service answers the batch's results, never making it twice.
     */
    async changeStatuses(changes: StatusBatchRequest['changes'], batchOptions?: StatusBatchOptions): Promise<StatusBatchAnswer> {
      const answer = await send<StatusBatchAnswer['data']>({
        method: 'POST',
        path: route('/partner/agents/status/batch'),
        body: { changes: changes.map(({ agentId, enabled }) => ({ agentId, enabled })) },
        headers: changeHeaders(batchOptions),
        repeatableAfterNetworkError: true,
        signal: batchOptions?.signal,
      });
      const { location, ...common } = { ...replayOf(answer), batchId: answer.data.batchId };
      return answer.status === 202
        ? { ...common, status: 202, data: answer.data as ResponseBody<'setAgentStatusBatch', 202>, location }
        : { ...common, status: 200, data: answer.data as StatusBatch };
    },

    /** A batch's results as they stand now (readable for 24 hours after it was sent). */
    async getStatusBatch(batchId: string, requestOptions?: RequestOptions) {
      return read<StatusBatch>(route('/partner/agents/status/batch/{batchId}', { batchId }), requestOptions);
    },

    /**
     * One page of the network's events, oldest first, after the cursor `after` (from the oldest kept
     * without it). A cursor older than the retention is a PartnerApiError 410 (events-gone).
     */
    async listEvents(page: EventPageOptions = {}) {
      const query = { after: page.after, limit: page.limit, types: page.types?.join(','), agentId: page.agentId };
      return read<EventPage>(route('/partner/events', {}, query), page);
    },

    /**
     * Pages of events following `nextCursor` while `hasMore`; ends once caught up (the last page's
     * `nextCursor` is where to read from later).
     */
    async *eventPages(pages: EventPageOptions = {}): AsyncGenerator<EventPage> {
      let after = pages.after;
      for (;;) {
        const { data } = await client.listEvents({ ...pages, after });
        yield data;
        if (!data.hasMore) return;
        after = data.nextCursor;
      }
    },

    /**
     * The events as they commit (Server-Sent Events), as an async iterator of `{ id, type, event }`
     * that reconnects by itself with Last-Event-ID: no event missed, none repeated. End it with
     * `signal` or by leaving the loop.
     */
    listenToEvents(listenOptions: ListenOptions = {}): AsyncGenerator<ListenedEvent> {
      return listenToEvents({ open: transport.open, sleep, path: (query) => route('/partner/events', {}, query) }, listenOptions);
    },

    /**
     * Registers an endpoint; the answer holds its signing secret, shown only here. Not repeated after
     * a network error (the service may have made it; list the endpoints to find out), only after 429/503.
     */
    async createWebhookEndpoint(endpoint: WebhookEndpointRequest, requestOptions?: RequestOptions) {
      return call<CreatedWebhookEndpoint>('POST', route('/partner/webhook-endpoints'), false, requestOptions, endpoint);
    },

    async listWebhookEndpoints(requestOptions?: RequestOptions) {
      return read<ResponseBody<'listWebhookEndpoints', 200>>(route('/partner/webhook-endpoints'), requestOptions);
    },

    async deleteWebhookEndpoint(endpointId: string, requestOptions?: RequestOptions) {
      return call<undefined>('DELETE', route('/partner/webhook-endpoints/{endpointId}', { endpointId }), true, requestOptions);
    },

    /**
     * A new signing secret (the previous one keeps signing beside it for 24 hours). Not repeated after
     * a network error: a second rotation would retire the secret that answer carried.
     */
    async rotateWebhookSecret(endpointId: string, requestOptions?: RequestOptions) {
      const path = route('/partner/webhook-endpoints/{endpointId}/rotate-secret', { endpointId });
      return call<RotatedWebhookSecret>('POST', path, false, requestOptions);
    },

    /** The endpoint's latest deliveries, newest first, each with its attempts. */
    async listWebhookDeliveries(endpointId: string, list: { limit?: number } & RequestOptions = {}) {
      return read<ResponseBody<'listWebhookDeliveries', 200>>(
        route('/partner/webhook-endpoints/{endpointId}/deliveries', { endpointId }, { limit: list.limit }),
        list,
      );
    },

    /** Makes a delivery due again at once (same webhook-id); repeating it only makes it due again. */
    async retryWebhookDelivery(endpointId: string, deliveryId: string, requestOptions?: RequestOptions) {
      const path = route('/partner/webhook-endpoints/{endpointId}/deliveries/{deliveryId}/retry', { endpointId, deliveryId });
      return call<RetriedWebhookDelivery>('POST', path, true, requestOptions);
    },

    /** The OpenAPI document of an API version (the client's by default). */
    async getOpenApiDocument(version: ApiVersion = apiVersion, requestOptions?: RequestOptions) {
      return read<ResponseBody<'getOpenApiDocument', 200>>(route('/partner/openapi.json', {}, { version }), requestOptions);
    },
  };
  return client;
}

export type PartnerClient = ReturnType<typeof createPartnerClient>;
