import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Metrics } from '../observability/metrics.js';
import { DependencyError, timedCall } from './dependency-error.js';

export interface SpendManagementClient {
  /**
   * Pauses the spending periods of 1 to 100 campaigns. Resolves with the campaigns spend
   * management confirmed in `paused`; one it leaves out is an answer about that campaign, not a
   * failure. Any status but 200, a network error or a time-out rejects (a failure of the batch).
   */
  pauseSpendingPeriods(campaignIds: readonly string[]): Promise<{ confirmed: string[] }>;
}

export interface SpendManagementOptions {
  baseUrl: string;
  token: string | undefined;
  timeoutMs: number;
  metrics: Metrics;
  log: Logger;
}

/**
 * The spend-management API (CONTRACT.md section 6) over Node's own fetch (undici, built in: no
 * client library to load, and about a fifth less CPU a call than got, measured with 100 ids). One
 * attempt per call, bounded by an explicit time-out that covers the answer's body too: a retry
 * inside the call would double every hang and hide attempts from the breaker; retrying is the job
 * of the request's repeat and of the worker, with backoff. Redirects are not followed (the bearer
 * token goes to the configured origin only): a 3xx is a bad answer like any other non-200. Errors
 * leave this module as DependencyError carrying status or code only, never the request (which
 * holds the bearer token).
 */
export function createSpendManagementClient(options: SpendManagementOptions): SpendManagementClient {
  const url = new URL('v1/spending-periods/pause', options.baseUrl.endsWith('/') ? options.baseUrl : `${options.baseUrl}/`);
  const fixedHeaders: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' };
  if (options.token) fixedHeaders.authorization = `Bearer ${options.token}`;

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
    // fetch's network errors are TypeError('fetch failed') with the socket's error as the cause.
    const code = (error as { cause?: { code?: unknown } }).cause?.code;
    return new DependencyError('spend_management', 'unavailable', typeof code === 'string' ? code : name);
  }

  return {
    pauseSpendingPeriods: (campaignIds) =>
      timedCall(
        options.metrics,
        'spend_management',
        'pause_spending_periods',
        async () => {
          const response = await fetch(url, {
            method: 'POST',
            headers: { ...fixedHeaders, 'idempotency-key': randomUUID() },
            body: JSON.stringify({ campaignIds, reason: 'agent-disabled' }),
            redirect: 'manual',
            signal: AbortSignal.timeout(options.timeoutMs),
          });
          if (response.status !== 200) {
            await response.body?.cancel().catch(() => undefined); // frees the connection
            throw refused(response.status);
          }
          const body = (await response.json()) as { paused?: unknown } | null;
          if (!Array.isArray(body?.paused)) throw new DependencyError('spend_management', 'bad_response', 'no "paused" list in the answer');
          const paused = new Set(body.paused);
          return { confirmed: campaignIds.filter((id) => paused.has(id)) };
        },
        toDependencyError,
      ),
  };
}
