import { randomUUID } from 'node:crypto';
import got, { HTTPError, RequestError, type Got } from 'got';
import type { Metrics } from '../observability/metrics.js';
import { DependencyError } from './dependency-error.js';

export interface SpendManagementClient {
  /** Pauses the spending periods of 1 to 100 campaigns; resolves when all are paused. */
  pauseSpendingPeriods(campaignIds: readonly string[]): Promise<void>;
}

export interface SpendManagementOptions {
  baseUrl: string;
  token: string | undefined;
  timeoutMs: number;
  metrics: Metrics;
}

/**
 * The spend-management API (CONTRACT.md section 6) over got. Explicit timeout per attempt; one
 * retry, which is safe because pausing is idempotent and the idempotency key is the same on the
 * retry. Errors leave this module as DependencyError carrying status or code only.
 */
export function createSpendManagementClient(options: SpendManagementOptions): SpendManagementClient {
  const http: Got = got.extend({
    prefixUrl: options.baseUrl,
    timeout: { request: options.timeoutMs },
    retry: { limit: 1, methods: ['POST'], statusCodes: [408, 429, 500, 502, 503, 504], calculateDelay: ({ computedValue }) => (computedValue ? 50 : 0) },
    headers: options.token ? { authorization: `Bearer ${options.token}` } : {},
    responseType: 'json',
    throwHttpErrors: true,
  });

  return {
    async pauseSpendingPeriods(campaignIds) {
      const started = performance.now();
      let outcome: 'ok' | 'error' = 'error';
      try {
        const response = await http.post('v1/spending-periods/pause', {
          json: { campaignIds, reason: 'agent-disabled' },
          headers: { 'idempotency-key': randomUUID() },
        });
        const body = response.body as { paused?: unknown };
        const paused = new Set(Array.isArray(body?.paused) ? body.paused : []);
        const missing = campaignIds.filter((id) => !paused.has(id));
        if (missing.length > 0) {
          throw new DependencyError('spend_management', 'bad_response', `${missing.length} of ${campaignIds.length} campaigns not confirmed paused`);
        }
        outcome = 'ok';
      } catch (error) {
        throw toDependencyError(error);
      } finally {
        options.metrics.dependencyDuration.observe(
          { dependency: 'spend_management', operation: 'pause_spending_periods', outcome },
          (performance.now() - started) / 1000,
        );
      }
    },
  };
}

function toDependencyError(error: unknown): DependencyError {
  if (error instanceof DependencyError) return error;
  if (error instanceof HTTPError) {
    const status = error.response.statusCode;
    return new DependencyError('spend_management', 'bad_response', `HTTP ${status}`, status);
  }
  if (error instanceof RequestError) {
    return new DependencyError('spend_management', error.code === 'ETIMEDOUT' ? 'timeout' : 'unavailable', error.code);
  }
  return new DependencyError('spend_management', 'unavailable', (error as Error).name);
}

/** 4xx answers other than 408/429 mean our request was refused, not that the service is down. */
export function isSpendManagementCallerError(error: unknown): boolean {
  const status = error instanceof DependencyError ? error.status : undefined;
  return status !== undefined && status >= 400 && status < 500 && status !== 408 && status !== 429;
}
