import type { Logger } from 'pino';
import { type DatabasePool, sql } from 'slonik';
import { z } from 'zod';
import type { Metrics } from '../observability/metrics.js';
import type { CampaignStateStore } from './campaign-state.js';
import { postgresCall } from './postgres.js';

// After a Redis failover: what PostgreSQL records as paused by recent disables is marked paused in
// Redis again, so "paused in PostgreSQL implies paused in Redis" holds whatever the promoted replica
// missed (it lagged, or was not connected when the writes were acknowledged).

const changeRow = z.object({ change_id: z.string(), agent_id: z.string(), enabled: z.boolean(), recent: z.boolean() });
const idsRow = z.object({ ids: z.array(z.string()) });

/** Change rows read per statement, newest first; campaigns marked per Redis call. */
const changesPerRead = 1_000;
const campaignsPerCall = 500;

export interface FailoverReassertOptions {
  /** The worker's pool: the reads are the worker's kind of work. */
  pool: DatabasePool;
  campaignState: CampaignStateStore;
  /** REDIS_FAILOVER_REASSERT_WINDOW_MS: disables recorded this long before the failover was seen are covered. */
  windowMs: number;
  /** How long to wait before trying again after a failed attempt. */
  retryMs: number;
  metrics: Metrics;
  log: Logger;
}

/**
 * The agents with a disable recorded within the window, from the change table's primary key, newest
 * first (change ids grow with time; the window is far wider than any disorder between them).
 */
async function recentlyDisabledAgents(pool: DatabasePool, timed: ReturnType<typeof postgresCall>, windowMs: number): Promise<Set<string>> {
  const agents = new Set<string>();
  let before: string | null = null;
  for (;;) {
    const rows = await timed('read_recent_disables', () =>
      pool.any(sql.type(changeRow)`
        SELECT change_id::text AS change_id, agent_id, enabled, changed_at > now() - make_interval(secs => ${windowMs / 1000}) AS recent
        FROM agent_status_changes
        WHERE change_id < coalesce(${before}::bigint, 9223372036854775807)
        ORDER BY change_id DESC
        LIMIT ${changesPerRead}`),
    );
    for (const row of rows) if (row.recent && !row.enabled) agents.add(row.agent_id);
    if (rows.length < changesPerRead || rows.some((row) => !row.recent)) return agents;
    before = rows.at(-1)!.change_id;
  }
}

/** Marks paused in Redis every campaign of the agent that PostgreSQL records as paused; how many. */
async function reassertAgent(options: FailoverReassertOptions, timed: ReturnType<typeof postgresCall>, agentId: string): Promise<number> {
  let after: string | null = null;
  let count = 0;
  for (;;) {
    const { ids } = await timed('read_paused_campaigns', () =>
      options.pool.one(sql.type(idsRow)`
        SELECT ARRAY(
          SELECT campaign_id::text FROM campaigns
          WHERE agent_id = ${agentId} AND paused AND campaign_id > coalesce(${after}::uuid, '00000000-0000-0000-0000-000000000000')
          ORDER BY campaign_id
          LIMIT ${campaignsPerCall}) AS ids`),
    );
    if (ids.length === 0) return count;
    // Every campaign must be confirmed: a refusal is retried with the whole re-assertion.
    const { confirmed } = await options.campaignState.markPaused(ids);
    if (confirmed.length < ids.length) throw new Error(`Redis confirmed ${confirmed.length} of ${ids.length} campaigns`);
    count += ids.length;
    if (ids.length < campaignsPerCall) return count;
    after = ids.at(-1)!;
  }
}

/**
 * Runs on every failover the campaign state reports: one re-assertion at a time; a failover seen
 * while one runs starts another after it; a failed one is tried again after `retryMs` until it
 * succeeds or the service stops.
 */
class FailoverReassert {
  private readonly timed: ReturnType<typeof postgresCall>;
  private running: Promise<void> | undefined;
  private again = false;
  private stopped = false;
  private retry: NodeJS.Timeout | undefined;

  constructor(private readonly options: FailoverReassertOptions) {
    this.timed = postgresCall(options.metrics);
  }

  private async reassert(): Promise<void> {
    const { options } = this;
    const startedAt = Date.now();
    const agents = await recentlyDisabledAgents(options.pool, this.timed, options.windowMs);
    let campaigns = 0;
    for (const agentId of agents) campaigns += await reassertAgent(options, this.timed, agentId);
    options.metrics.redisReassertedCampaigns.inc(campaigns);
    options.metrics.redisReasserts.inc({ outcome: 'ok' });
    options.log.warn(
      { agents: agents.size, campaigns, durationMs: Date.now() - startedAt },
      'Redis failover: campaigns paused in the database marked paused in Redis again',
    );
  }

  readonly trigger = (): void => {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    clearTimeout(this.retry);
    this.running = this.reassert()
      .catch((error: unknown) => {
        this.options.metrics.redisReasserts.inc({ outcome: 'failed' });
        this.options.log.error({ reason: (error as Error).message }, 'Redis failover: re-assertion failed; trying again');
        this.again = true;
      })
      .finally(() => {
        this.running = undefined;
        if (!this.again || this.stopped) return;
        this.again = false;
        this.retry = setTimeout(this.trigger, this.options.retryMs);
        this.retry.unref();
      });
  };

  /** Stops retrying and waits for a re-assertion under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retry);
    await this.running;
  }
}

/** Starts re-asserting after every failover the campaign state reports (see FailoverReassert). */
export function startFailoverReassert(options: FailoverReassertOptions): { stop(): Promise<void> } {
  const reassert = new FailoverReassert(options);
  options.campaignState.onFailover?.(reassert.trigger);
  for (const outcome of ['ok', 'failed']) options.metrics.redisReasserts.inc({ outcome }, 0);
  return { stop: () => reassert.stop() };
}
