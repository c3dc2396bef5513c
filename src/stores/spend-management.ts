import { randomUUID } from 'node:crypto';
import got, { type Got, HTTPError, RequestError } from 'got';
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
 * The spend-management API (CONTRACT.md section 6) over got. One attempt per call, bounded by an
 * explicit time-out: a retry inside the call would double every hang and hide attempts from the
 * breaker; retrying is the job of the request's repeat and of the worker, with backoff. Errors
 * leave this module as DependencyError carrying status or code only, never the request (which
 * holds the bearer token).
 */
export function createSpendManagementClient(options: SpendManagementOptions): SpendManagementClient {
  const http: Got = got.extend({
    prefixUrl: options.baseUrl,
    timeout: { request: options.timeoutMs },
    retry: { limit: 0 },
    headers: options.token ? { authorization: `Bearer ${options.token}` } : {},
    responseType: 'json',
    throwHttpErrors: true,
  });

  function toDependencyError(error: unknown): DependencyError {
    if (error instanceof HTTPError) {
      const status = error.response.statusCode;
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
    if (error instanceof RequestError) {
      return new DependencyError('spend_management', error.code === 'ETIMEDOUT' ? 'timeout' : 'unavailable', error.code);
    }
    return new DependencyError('spend_management', 'unavailable', (error as Error).name);
  }

  return {
    pauseSpendingPeriods: (campaignIds) =>
      timedCall(
        options.metrics,
        'spend_management',
        'pause_spending_periods',
        async () => {
          const response = await http.post('v1/spending-periods/pause', {
            json: { campaignIds, reason: 'agent-disabled' },
            headers: { 'idempotency-key': randomUUID() },
          });
          const body = response.body as { paused?: unknown };
          if (!Array.isArray(body?.paused)) throw new DependencyError('spend_management', 'bad_response', 'no "paused" list in the answer');
          const paused = new Set(body.paused);
          return { confirmed: campaignIds.filter((id) => paused.has(id)) };
        },
        toDependencyError,
      ),
  };
}
