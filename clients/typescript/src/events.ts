import { PartnerApiError, PartnerEventError, PartnerNetworkError } from './errors.js';
import { SseParser } from './sse.js';
import type { Call } from './transport.js';
import type { PartnerEvent } from './webhooks.js';

/** An event of the live listener: `id` is its cursor (what `after` and `Last-Event-ID` take). */
export interface ListenedEvent {
  id: string;
  /** The CloudEvent's type, e.g. partner-agent-status.agent.disabled. */
  type: string;
  event: PartnerEvent;
}

export interface EventFilter {
  /** Event types, with or without the `partner-agent-status.` prefix. */
  types?: string[];
  /** Only this agent's events. */
  agentId?: string;
}

export interface ListenOptions extends EventFilter {
  /** Start after this cursor (a page's `nextCursor` or an event's `id`); from the oldest kept event without it. */
  after?: string;
  /** Ends the listener: the iterator returns, no error. */
  signal?: AbortSignal;
  /** Reconnection waits: capped exponential backoff with full jitter (defaults 500 ms, 30 s). */
  reconnect?: { baseDelayMs?: number; maxDelayMs?: number };
  /**
   * A stream that says nothing for this long is taken as dead (a link that black-holes sends no
   * reset) and reconnected. The service sends a comment at least every 15 s; default 45 s.
   */
  idleTimeoutMs?: number;
  /** Told of every lost connection before the listener reconnects (for logs and metrics). */
  onReconnect?: (info: { error: unknown; attempt: number; delayMs: number; lastEventId: string | undefined }) => void;
}

export interface ListenDependencies {
  open: (call: Call) => Promise<Response>;
  path: (query: Record<string, string | undefined>) => string;
  sleep: (ms: number, signal: AbortSignal | undefined) => Promise<void>;
  random?: () => number;
}

/**
 * What the listener must not repeat unchanged: a 4xx other than 429 (400, 401, 410 events-gone), or
 * an event that is not JSON (read again on every reconnect).
 */
function fatal(error: unknown): boolean {
  if (error instanceof PartnerEventError) return true;
  return error instanceof PartnerApiError && error.status >= 400 && error.status < 500 && error.status !== 429;
}

function aborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted ?? false;
}

/** The CloudEvent of a message; a PartnerEventError (which ends the listener) when it is not JSON. */
function parsedEvent(id: string, previous: string | undefined, data: string): PartnerEvent {
  try {
    return JSON.parse(data) as PartnerEvent;
  } catch (error) {
    throw new PartnerEventError(id, previous === '' ? undefined : previous, error);
  }
}

/**
 * Reads one connection's events until it ends, fails or goes idle. Each event is yielded only after
 * the parser has moved the last event id past it, so a reconnect resumes after the last yielded one.
 */
async function* readStream(response: Response, parser: SseParser, idleTimeoutMs: number, cancel: AbortController) {
  if (!response.body)
    throw new PartnerNetworkError('the event stream had no body', 1, { name: 'Error', code: undefined, message: 'no body' });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let idle: ReturnType<typeof setTimeout> | undefined;
  const armIdle = () => {
    clearTimeout(idle);
    idle = setTimeout(() => cancel.abort(new Error(`no line on the event stream for ${idleTimeoutMs} ms`)), idleTimeoutMs);
  };
  try {
    armIdle();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      armIdle();
      let previous = parser.lastEventId;
      for (const message of parser.push(value)) {
        yield { id: message.id, type: message.type, event: parsedEvent(message.id, previous, message.data) } satisfies ListenedEvent;
        previous = message.id;
      }
    }
  } finally {
    clearTimeout(idle);
    reader.cancel().catch(() => undefined);
  }
}

/**
 * The events of the network as they commit, forever: a Server-Sent Events stream of
 * GET /partner/events, reconnected after any loss with `Last-Event-ID` (so no event is missed or
 * repeated) after a capped, jittered backoff; a 429 too-many-streams or 503 waits its Retry-After
 * first. A 4xx other than 429 (a 410 when the cursor is older than the retention) ends it with the
 * PartnerApiError. An event that is not JSON ends it with a PartnerEventError. A stream that sent
 * `retry:` is waited for at least that long before each later reconnect. An abort of `signal` ends
 * it quietly.
 */
export async function* listenToEvents(dependencies: ListenDependencies, options: ListenOptions = {}): AsyncGenerator<ListenedEvent> {
  const baseDelayMs = options.reconnect?.baseDelayMs ?? 500;
  const maxDelayMs = options.reconnect?.maxDelayMs ?? 30_000;
  const idleTimeoutMs = options.idleTimeoutMs ?? 45_000;
  const random = dependencies.random ?? Math.random;
  const path = dependencies.path({ types: options.types?.join(','), agentId: options.agentId });
  let lastEventId = options.after;
  let failures = 0;
  /** The stream's `retry:` (its reconnection time, WHATWG): the least a reconnect waits once sent. */
  let serverRetryMs: number | undefined;
  while (!aborted(options.signal)) {
    const cancel = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, cancel.signal]) : cancel.signal;
    try {
      const response = await dependencies.open({
        method: 'GET',
        path,
        headers: { accept: 'text/event-stream', ...(lastEventId === undefined ? {} : { 'last-event-id': lastEventId }) },
        repeatableAfterNetworkError: true,
        signal,
        stream: true,
      });
      // Connected: the backoff starts over (a stream that fails at once still waits base * jitter).
      failures = 0;
      const parser = new SseParser(lastEventId);
      try {
        for await (const event of readStream(response, parser, idleTimeoutMs, cancel)) {
          lastEventId = event.id;
          yield event;
        }
      } finally {
        serverRetryMs = parser.retryMs ?? serverRetryMs;
      }
      // The service ended the stream (a drain, a restart): reconnect at once, as after a failure.
      throw new Error('the event stream ended');
    } catch (error) {
      if (aborted(options.signal)) return;
      if (fatal(error)) throw error;
      failures += 1;
      const backoff = Math.floor(random() * Math.min(maxDelayMs, baseDelayMs * 2 ** (failures - 1)));
      const retryAfter = error instanceof PartnerApiError ? (error.retryAfterSeconds ?? 0) * 1000 : 0;
      const delayMs = retryAfter + Math.max(backoff, serverRetryMs ?? 0);
      options.onReconnect?.({ error, attempt: failures, delayMs, lastEventId });
      try {
        await dependencies.sleep(delayMs, options.signal);
      } catch {
        return;
      }
    } finally {
      cancel.abort();
    }
  }
}
