import type { Logger } from 'pino';
import type { Agent } from 'undici';
import { DependencyError, timedCall } from '../observability/dependency-calls.js';
import type { Metrics } from '../observability/metrics.js';

export interface SpendManagementClient {
  /**
   * Pauses the spending periods of 1 to 100 campaigns. Resolves with the campaigns spend
   * management confirmed in `paused`; one it leaves out is an answer about that campaign, not a
   * failure. Any status but 200, a network error or a time-out rejects (a failure of the batch).
   */
  /** `callKey`: the call's idempotency key; a call sent again (its outcome in doubt) carries the same one. */
  pauseSpendingPeriods(campaignIds: readonly string[], callKey: string): Promise<{ confirmed: string[] }>;
  /** Closes the kept-alive connections (after the last call). */
  close(): Promise<void>;
}

export interface SpendManagementOptions {
  baseUrl: string;
  token: string | undefined;
  timeoutMs: number;
  metrics: Metrics;
  log: Logger;
}

/**
 * The spend-management API (docs/interfaces.md §6) over undici's `request` (the HTTP client of
 * Node's own fetch, without the web streams, which cost it CPU on every call; got costs more), on
 * connections kept alive. One attempt per call,
 * bounded by one time-out over the whole exchange, the answer's body included: a retry inside the
 * call would double every hang and hide attempts from the breaker; retrying is the job of the
 * request's repeat and of the worker, with backoff. Redirects are not followed (the bearer token
 * goes to the configured origin only): a 3xx is a bad answer like any other non-200. Errors leave
 * this module as DependencyError carrying status or code only, never the request (which holds the
 * bearer token).
 */
export function createSpendManagementClient(options: SpendManagementOptions): SpendManagementClient {
  const url = new URL('v1/spending-periods/pause', options.baseUrl.endsWith('/') ? options.baseUrl : `${options.baseUrl}/`);
  const fixedHeaders: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' };
  if (options.token) fixedHeaders.authorization = `Bearer ${options.token}`;
  // undici is loaded with the first call: a replica that never disables never loads it, and one
  // that does pays for loading it once.
  let client: Promise<{ request: typeof import('undici').request; dispatcher: Agent }> | undefined;
  const connect = () => {
    client ??= import('undici').then(
      ({ Agent: Dispatcher, request }) => ({ request, dispatcher: new Dispatcher() }),
      (error: unknown) => {
        client = undefined; // tried again by the next call
        throw error;
      },
    );
    return client;
  };

  function refused(status: number): DependencyError {
    if (status === 401 || status === 403) {
      options.metrics.spendManagementAuthFailures.inc({ status: String(status) });
      options.log.error(
        { dependency: 'spend_management', status },
        'spend management refused our credentials: check SPEND_MANAGEMENT_TOKEN',
      );
      return new DependencyError('spend_management', 'unauthorized', `HTTP ${status}`, status);
    }
    return new DependencyError('spend_management', 'bad_response', `HTTP ${status}`, status);
  }

  function toDependencyError(error: unknown): DependencyError {
    const name = (error as Error).name;
    if (name === 'TimeoutError') return new DependencyError('spend_management', 'timeout', 'ETIMEDOUT');
    if (error instanceof SyntaxError) return new DependencyError('spend_management', 'bad_response', 'answer is not JSON');
    // Socket errors carry their code (ECONNREFUSED, ECONNRESET), undici's own a UND_ERR_* one.
    const code = (error as { code?: unknown }).code;
    return new DependencyError('spend_management', 'unavailable', typeof code === 'string' ? code : name);
  }

  return {
    pauseSpendingPeriods: (campaignIds, callKey) =>
      timedCall(
        options.metrics,
        'spend_management',
        'pause_spending_periods',
        async () => {
          const { request, dispatcher } = await connect();
          // When the call leaves (its key and size, never its campaigns), for whoever must tell a late
          // send from a late arrival: the chaos test holds each send to the enables answered before it.
          options.log.debug({ callKey, campaigns: campaignIds.length }, 'spend-management call sent');
          const response = await request(url, {
            dispatcher,
            method: 'POST',
            headers: { ...fixedHeaders, 'idempotency-key': callKey },
            body: JSON.stringify({ campaignIds, reason: 'agent-disabled' }),
            signal: AbortSignal.timeout(options.timeoutMs),
          });
          if (response.statusCode !== 200) {
            await response.body.dump().catch(() => undefined); // frees the connection
            throw refused(response.statusCode);
          }
          const body = (await response.body.json()) as { paused?: unknown } | null;
          if (!Array.isArray(body?.paused)) throw new DependencyError('spend_management', 'bad_response', 'no "paused" list in the answer');
          const paused = new Set(body.paused);
          return { confirmed: campaignIds.filter((id) => paused.has(id)) };
        },
        toDependencyError,
      ),
    close: async () => {
      if (client) await (await client).dispatcher.close();
    },
  };
}
