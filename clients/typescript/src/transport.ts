import { PartnerApiError, PartnerNetworkError, type Problem } from './errors.js';

/** How the client repeats a request that got no answer, a 429 or a 503. */
export interface RetryOptions {
  /** Attempts in all, the first included (default 4; 1 turns retries off). */
  maxAttempts?: number;
  /** The first backoff's ceiling; each next one doubles it (default 250 ms). */
  baseDelayMs?: number;
  /** No backoff is longer (default 8 s). */
  maxDelayMs?: number;
  /** A Retry-After longer than this is not waited for: the error is thrown at once (default 60 s). */
  maxRetryAfterMs?: number;
  /** An attempt with no answer by then is abandoned as a network error (default 30 s). */
  attemptTimeoutMs?: number;
}

/** Something the service said about the API version in use (RFC 9745 Deprecation, RFC 8594 Sunset). */
export interface DeprecationWarning {
  kind: 'deprecation';
  apiVersion: string;
  /** When the version was deprecated (the Deprecation field), if it parsed. */
  deprecatedAt: Date | undefined;
  /** When the version stops working (the Sunset field), if it was sent. */
  sunsetAt: Date | undefined;
  /** Where the deprecation is explained (Link with rel="deprecation"). */
  link: string | undefined;
  requestId: string | undefined;
}

export interface TransportOptions {
  baseUrl: string;
  apiKey: string;
  apiVersion: string;
  retry: Required<RetryOptions>;
  fetch: typeof fetch;
  onWarning: (warning: DeprecationWarning) => void;
  /** Waits `ms` (injected so that a test can observe the waits; setTimeout otherwise). */
  sleep: (ms: number, signal: AbortSignal | undefined) => Promise<void>;
}

export interface Call {
  method: 'GET' | 'POST' | 'DELETE';
  /** The path and query, starting with `/`. */
  path: string;
  body?: unknown;
  headers?: Record<string, string>;
  /**
   * Whether the request may be sent again after a network error, when the service may have acted on
   * it: true for reads, deletes and the POSTs the service deduplicates by Idempotency-Key. A 429 or
   * 503 is always repeated (the service changed nothing).
   */
  repeatableAfterNetworkError: boolean;
  signal?: AbortSignal | undefined;
  /**
   * The answer is a stream read for as long as it lasts (Server-Sent Events): attemptTimeoutMs
   * bounds only the wait for its headers, never the body.
   */
  stream?: boolean;
}

/** A 2xx answer. */
export interface Answer<T> {
  status: number;
  data: T;
  headers: Headers;
  requestId: string | undefined;
}

export const defaultRetry: Required<RetryOptions> = {
  maxAttempts: 4,
  baseDelayMs: 250,
  maxDelayMs: 8_000,
  maxRetryAfterMs: 60_000,
  attemptTimeoutMs: 30_000,
};

/** A Retry-After value (delay in seconds, or an HTTP-date) in milliseconds from now. */
export function retryAfterMs(value: string | null, now = Date.now()): number | undefined {
  if (value === null) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/** Capped exponential backoff with full jitter: a random wait up to min(max, base * 2^(attempt-1)). */
export function backoffMs(attempt: number, retry: Required<RetryOptions>, random = Math.random): number {
  return Math.floor(random() * Math.min(retry.maxDelayMs, retry.baseDelayMs * 2 ** (attempt - 1)));
}

/**
 * Whether an error answer is worth repeating unchanged: 429 and 503 (nothing was changed), and the
 * 409 that says the same Idempotency-Key's first request is still running (it comes with
 * Retry-After and is answered with that request's outcome once it ends). Never any other 4xx.
 */
function repeatable(status: number, problemType: string | undefined): boolean {
  return status === 429 || status === 503 || (status === 409 && (problemType?.endsWith(':idempotency-key-in-use') ?? false));
}

/** The deprecation fields of an answer, when it carries them. */
function deprecationOf(headers: Headers, apiVersion: string): DeprecationWarning | undefined {
  const deprecation = headers.get('deprecation');
  if (deprecation === null) return undefined;
  const epoch = /^@(-?\d+)$/.exec(deprecation.trim())?.[1];
  const sunset = headers.get('sunset');
  const link = /<([^>]*)>\s*;[^,]*rel="?deprecation"?/i.exec(headers.get('link') ?? '')?.[1];
  return {
    kind: 'deprecation',
    apiVersion: headers.get('partner-api-version') ?? apiVersion,
    deprecatedAt: epoch === undefined ? undefined : new Date(Number(epoch) * 1000),
    sunsetAt: sunset === null || Number.isNaN(Date.parse(sunset)) ? undefined : new Date(sunset),
    link,
    requestId: headers.get('x-request-id') ?? undefined,
  };
}

/** Only the name, code and message of what fetch threw (never the request it was given). */
function causeOf(error: unknown): { name: string; code: string | undefined; message: string } {
  const inner = (error as { cause?: unknown }).cause ?? error;
  const { name, code, message } = inner as { name?: unknown; code?: unknown; message?: unknown };
  return { name: String(name ?? 'Error'), code: typeof code === 'string' ? code : undefined, message: String(message ?? inner) };
}

export function createTransport(options: TransportOptions) {
  const { apiKey, retry } = options;
  const base = options.baseUrl.replace(/\/+$/, '');
  // Belt and braces: the service never echoes a key, and nothing the client raises may hold one.
  // (A key is long and random; a few characters could only be a mistake, and would mangle text.)
  const scrub = (text: string) => (apiKey.length >= 8 ? text.split(apiKey).join('[redacted]') : text);

  async function attempt(call: Call, idempotencyKey: string | undefined): Promise<Response> {
    if (!call.stream) return fetchOnce(call, idempotencyKey, AbortSignal.timeout(retry.attemptTimeoutMs));
    // A timer of our own, cleared once the headers came: AbortSignal.timeout would end the stream too.
    const headersTimeout = new AbortController();
    const timer = setTimeout(() => headersTimeout.abort(new DOMException('no headers in time', 'TimeoutError')), retry.attemptTimeoutMs);
    try {
      return await fetchOnce(call, idempotencyKey, headersTimeout.signal);
    } finally {
      clearTimeout(timer);
    }
  }

  async function fetchOnce(call: Call, idempotencyKey: string | undefined, timeout: AbortSignal): Promise<Response> {
    return options.fetch(`${base}${call.path}`, {
      method: call.method,
      headers: {
        accept: 'application/json, application/problem+json',
        'x-api-key': apiKey,
        'partner-api-version': options.apiVersion,
        ...(call.body === undefined ? {} : { 'content-type': 'application/json' }),
        ...(idempotencyKey === undefined ? {} : { 'idempotency-key': idempotencyKey }),
        ...call.headers,
      },
      ...(call.body === undefined ? {} : { body: JSON.stringify(call.body) }),
      signal: call.signal ? AbortSignal.any([call.signal, timeout]) : timeout,
    });
  }

  async function problemOf(response: Response): Promise<Problem | undefined> {
    const text = scrub(await response.text());
    if (!/json/.test(response.headers.get('content-type') ?? '')) return undefined;
    try {
      const parsed = JSON.parse(text) as unknown;
      return typeof parsed === 'object' && parsed !== null && typeof (parsed as Problem).type === 'string'
        ? (parsed as Problem)
        : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * Sends the call, repeating it as RetryOptions say; a POST carries one Idempotency-Key (the
   * caller's, else a new UUID) on every attempt. Resolves with a 2xx answer whose body is not read
   * yet (a stream, such as Server-Sent Events, is read as it comes), rejects with PartnerApiError
   * (any other answer) or PartnerNetworkError (no answer).
   */
  async function open(call: Call): Promise<Response> {
    const idempotencyKey = call.method === 'POST' ? (call.headers?.['idempotency-key'] ?? globalThis.crypto.randomUUID()) : undefined;
    for (let attemptNumber = 1; ; attemptNumber += 1) {
      const last = attemptNumber >= retry.maxAttempts;
      let response: Response;
      try {
        response = await attempt(call, idempotencyKey);
      } catch (error) {
        if (call.signal?.aborted) throw call.signal.reason;
        const cause = causeOf(error);
        if (last || !call.repeatableAfterNetworkError) {
          throw new PartnerNetworkError(
            scrub(
              `${call.method} ${call.path.split('?')[0]}: no answer after ${attemptNumber} attempt(s) (${cause.code ?? cause.message})`,
            ),
            attemptNumber,
            { ...cause, message: scrub(cause.message) },
          );
        }
        await options.sleep(backoffMs(attemptNumber, retry), call.signal);
        continue;
      }
      const warning = deprecationOf(response.headers, options.apiVersion);
      if (warning) options.onWarning(warning);
      if (response.ok) return response;
      const problem = await problemOf(response);
      const waitMs = retryAfterMs(response.headers.get('retry-after'));
      if (!last && repeatable(response.status, problem?.type) && (waitMs ?? 0) <= retry.maxRetryAfterMs) {
        // Retry-After is a floor; the jitter spreads clients that were told the same moment.
        await options.sleep(waitMs === undefined ? backoffMs(attemptNumber, retry) : waitMs + backoffMs(1, retry), call.signal);
        continue;
      }
      throw new PartnerApiError(response.status, problem, {
        requestId: response.headers.get('x-request-id') ?? undefined,
        retryAfterSeconds: waitMs === undefined ? undefined : Math.ceil(waitMs / 1000),
      });
    }
  }

  /** open, then the body read as JSON (none for a 204). */
  async function send<T>(call: Call): Promise<Answer<T>> {
    const response = await open(call);
    const text = response.status === 204 ? '' : await response.text();
    const data = (text === '' ? undefined : JSON.parse(text)) as T;
    return { status: response.status, data, headers: response.headers, requestId: response.headers.get('x-request-id') ?? undefined };
  }

  return { open, send };
}

/** setTimeout as a promise that an abort ends early (rejecting with the signal's reason). */
export function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
