import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import calculateSlot from 'cluster-key-slot';
import { Cluster, type Redis, ReplyError, type Result } from 'ioredis';
import { DependencyError, redisFailure, timedCall } from '../observability/dependency-calls.js';
import type { Metrics } from '../observability/metrics.js';
import { createRedisClient, type RedisClient, type RedisLocation } from './redis-clients.js';

/** The key-value store's view of campaigns (docs/interfaces.md §5: hash `campaign:<id>`). */
export interface CampaignStateStore {
  /**
   * Sets `paused` = `1` on every campaign's hash (creating it when absent), in one round trip.
   * Resolves with the campaigns Redis confirmed; a key Redis refused (an error reply such as
   * WRONGTYPE) is left out, and only a failure of Redis itself (connection, time-out) rejects.
   */
  markPaused(campaignIds: readonly string[]): Promise<{ confirmed: string[] }>;
  /**
   * Calls `listener` each time the Redis behind REDIS_URL is found replaced (a failover to a replica,
   * or a restart): writes its predecessor acknowledged may be missing there.
   */
  onFailover?(listener: () => void): void;
  close(): Promise<void>;
}

const campaignKey = (campaignId: string) => `campaign:${campaignId}`;

/**
 * Sets `paused` = `1` on every key (a campaign hash) and answers, per key, 1 when Redis did, 0 when
 * it refused that key (an error reply such as WRONGTYPE: `redis.pcall` keeps it to that key). A
 * refusal that is about Redis itself, not the key (a demoted primary's READONLY, OOM over
 * maxmemory, MISCONF, NOREPLICAS, MASTERDOWN, BUSY, LOADING), is returned as the script's error:
 * the whole call fails, counts towards the breaker, and the client reconnects (reconnectOnError).
 * One EVALSHA instead of a pipeline of 100 HSETs: one command to encode and one reply to parse
 * instead of 100, which is most of the client's CPU per batch. ioredis adds
 * the key prefix to KEYS and falls back to EVAL when Redis lost the script. Keys of one call must
 * share a node: this serves the single Redis of REDIS_URL; in cluster mode (whose key layout has no
 * hash tags) every key is its own HSET instead, grouped by node (markPausedInCluster).
 */
const markPausedScript = `
local answers = {}
for i, key in ipairs(KEYS) do
  local reply = redis.pcall('HSET', key, 'paused', '1')
  if type(reply) == 'table' and reply.err then
    local class = string.match(reply.err, '^%u+')
    if class == 'READONLY' or class == 'OOM' or class == 'MISCONF' or class == 'NOREPLICAS'
      or class == 'MASTERDOWN' or class == 'BUSY' or class == 'LOADING' then
      return reply
    end
    answers[i] = 0
  else
    answers[i] = 1
  end
end
return answers`;

/** Redis errors after which this connection is worth replacing (it may lead to a demoted primary). */
const reconnectAfter = /^(READONLY|MASTERDOWN|LOADING)\b/;

/** Error replies that are about Redis (a node) as a whole, not about one key; a redirection still unfollowed after the client's retries is one too. */
const refusesAsAWhole = /^(READONLY|OOM|MISCONF|NOREPLICAS|MASTERDOWN|BUSY|LOADING|CLUSTERDOWN|TRYAGAIN|MOVED|ASK)\b/;

declare module 'ioredis' {
  interface RedisCommander<Context> {
    markCampaignsPaused(numberOfKeys: number, ...keys: string[]): Result<number[], Context>;
  }
}

export interface RedisCampaignStateOptions extends RedisLocation {
  keyPrefix: string;
  commandTimeoutMs: number;
  metrics: Metrics;
  /**
   * With more than 0: WAIT for that many replicas after the script (docs/interfaces.md §9);
   * `connected`: for as many as the primary says it has connected, no WAIT when it has none.
   */
  waitReplicas?: number | 'connected';
  waitTimeoutMs?: number;
  /** How often INFO is asked (the replicas `connected` waits for, and whether the server was replaced). */
  replicationCheckIntervalMs?: number;
}

/** One INFO field's value (`name:value` lines). */
function infoField(info: string, name: string): string | undefined {
  return new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim();
}

/**
 * What the replica last learnt from each primary's INFO: the replicas it has connected (what
 * `connected` waits for) and who it is (run_id and replication id). A primary whose identity
 * changed, or a new one at an address that was not a primary before, is a failover (or a restart
 * without its data): the listeners are told. A check that fails keeps what was known.
 */
class ReplicationWatch {
  private readonly replicasByNode = new Map<string, number>();
  private readonly identities = new Map<string, string>();
  private readonly listeners: (() => void)[] = [];
  private readonly timer: NodeJS.Timeout;
  private answered = false;
  private asking: Promise<void> | undefined;

  constructor(
    private readonly client: RedisClient,
    intervalMs: number,
    private readonly metrics: Metrics,
  ) {
    this.timer = setInterval(() => void this.check(), intervalMs);
    this.timer.unref();
  }

  /** Settles once some primary has answered INFO (asking now, once, while none has): the counts are known. */
  known(): Promise<void> {
    if (this.answered) return Promise.resolve();
    // Outside the caller's trace: the first disable asks, but INFO is the replica's, not the disable's.
    this.asking ??= context
      .with(ROOT_CONTEXT, () => this.check())
      .finally(() => {
        this.asking = undefined;
      });
    return this.asking;
  }

  /** The replicas the primary at `address` ('' for the one server of REDIS_URL) has connected; 0 when unknown. */
  replicas(address = ''): number {
    return this.replicasByNode.get(address) ?? 0;
  }

  onFailover(listener: () => void): void {
    this.listeners.push(listener);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private async check(): Promise<void> {
    const nodes: { address: string; node: Redis }[] =
      this.client instanceof Cluster
        ? this.client.nodes('master').map((node) => ({ address: `${node.options.host}:${node.options.port}`, node }))
        : [{ address: '', node: this.client }];
    let replaced = false;
    await Promise.all(
      nodes.map(async ({ address, node }) => {
        try {
          const answers = (await node.pipeline().info('server').info('replication').exec()) ?? [];
          const [server, replication] = answers.map(([error, text]) => (error ? '' : String(text)));
          if (infoField(replication ?? '', 'role') !== 'master') return;
          this.answered = true;
          this.replicasByNode.set(address, Number(infoField(replication ?? '', 'connected_slaves') ?? 0));
          const identity = `${infoField(server ?? '', 'run_id')}/${infoField(replication ?? '', 'master_replid')}`;
          const known = this.identities.get(address);
          // The first look at a single server is no failover; in a cluster, a primary at a new
          // address after the first check is one (a replica promoted).
          if (known !== identity && (known !== undefined || (address !== '' && this.identities.size > 0))) replaced = true;
          this.identities.set(address, identity);
        } catch {
          // Not connected, or no answer in time: what was known stays; the next check asks again.
        }
      }),
    );
    this.metrics.redisWaitReplicas.set(Math.max(0, ...this.replicasByNode.values()));
    if (!replaced) return;
    this.metrics.redisFailovers.inc();
    for (const listener of this.listeners) listener();
  }
}

/**
 * ioredis with settings for a request path: no offline queue and one retry per command, so an
 * outage fails fast (and feeds the breaker) instead of parking requests; the client reconnects by
 * itself in the background. RESP2 is kept explicitly (ioredis 6 defaults to RESP3; nothing here
 * needs it).
 */
export function createRedisCampaignState(options: RedisCampaignStateOptions): CampaignStateStore & { client: RedisClient } {
  const client = createRedisClient(options, {
    autoPipelining: true,
    clusterOfflineQueue: true,
    keyPrefix: options.keyPrefix,
    protocol: 2,
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: options.commandTimeoutMs,
    connectTimeout: Math.max(options.commandTimeoutMs, 1_000),
    retryStrategy: (attempt) => Math.min(attempt * 100, 2_000),
    // 1: reconnect and fail the command (it is the run's to retry, through the breaker).
    reconnectOnError: (error) => (reconnectAfter.test(error.message) ? 1 : false),
  });
  // Connection errors surface through the commands that fail; the 'error' event only needs a listener.
  client.on('error', () => undefined);
  client.defineCommand('markCampaignsPaused', { lua: markPausedScript });
  client.connect().catch(() => undefined);

  /** Right after start or a reconnect, waits (within the command timeout) for the connection. */
  async function connected(): Promise<void> {
    if (client.status === 'ready') return;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        client.off('ready', onReady);
        reject(new DependencyError('redis', 'unavailable', `not connected (${client.status})`));
      }, options.commandTimeoutMs);
      const onReady = () => {
        clearTimeout(timer);
        resolve();
      };
      client.once('ready', onReady);
    });
  }

  const configuredReplicas = options.waitReplicas ?? 0;
  const watch = new ReplicationWatch(client, options.replicationCheckIntervalMs ?? 1_000, options.metrics);
  if (configuredReplicas !== 'connected') options.metrics.redisWaitReplicas.set(configuredReplicas);
  /** The replicas WAIT asks for on the primary at `address` ('' for the one server). */
  const replicasFor = (address = '') => (configuredReplicas === 'connected' ? watch.replicas(address) : configuredReplicas);
  /**
   * The script and WAIT in one round trip (a pipeline): the batch counts as paused in Redis only
   * once `waitReplicas` replicas have its writes, so a failover to one of them keeps them. Fewer
   * acknowledgements within the time-out fail the batch as a Redis failure (`redis:unavailable`):
   * nothing is marked in the database, and the batch is settled once a replica answers again.
   */
  async function pausedAndReplicated(client: Redis, campaignIds: readonly string[], waitReplicas: number): Promise<number[]> {
    const answers = await client
      .pipeline()
      .markCampaignsPaused(campaignIds.length, ...campaignIds.map(campaignKey))
      .wait(waitReplicas, options.waitTimeoutMs ?? 100)
      .exec();
    const [script, wait] = answers ?? [];
    if (script?.[0]) throw script[0];
    if (wait?.[0]) throw wait[0];
    const acknowledged = Number(wait?.[1]);
    if (!(acknowledged >= waitReplicas)) {
      throw new DependencyError('redis', 'unavailable', `WAIT: ${acknowledged} of ${waitReplicas} replicas acknowledged`);
    }
    return script?.[1] as number[];
  }

  /**
   * Cluster mode: one HSET per key, issued together, which the client's auto-pipelining sends as
   * one round trip per node that serves their slots (redirections followed per key). An error
   * reply about one key (WRONGTYPE) is that campaign's refusal; one about a node as a whole, or no
   * answer within the command time-out, fails the batch as a Redis failure.
   */
  async function markPausedInCluster(cluster: Cluster, campaignIds: readonly string[]): Promise<{ confirmed: string[] }> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new DependencyError('redis', 'timeout', 'Command timed out')), options.commandTimeoutMs);
    });
    try {
      const answers = await Promise.race([Promise.allSettled(campaignIds.map((id) => cluster.hset(campaignKey(id), 'paused', '1'))), late]);
      const confirmed: string[] = [];
      answers.forEach((answer, index) => {
        if (answer.status === 'fulfilled') confirmed.push(campaignIds[index]!);
        else if (!(answer.reason instanceof ReplyError) || refusesAsAWhole.test(answer.reason.message)) throw answer.reason;
      });
      if (confirmed.length > 0) await replicated(cluster, confirmed);
      return { confirmed };
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * WAIT on the connection of each primary that served the batch (the one the cluster client sent
   * its HSETs on, so WAIT follows them): each must have `waitReplicas` replicas with those writes.
   * The primaries are found from the client's slot map (the slot of each prefixed key).
   */
  async function replicated(cluster: Cluster, campaignIds: readonly string[]): Promise<void> {
    const served = new Set(campaignIds.map((id) => cluster.slots[calculateSlot(`${options.keyPrefix}${campaignKey(id)}`)]?.[0]));
    const primaries = cluster.nodes('master').filter((node) => served.has(`${node.options.host}:${node.options.port}`));
    const wanted = primaries.map((node) => replicasFor(`${node.options.host}:${node.options.port}`));
    if (wanted.every((count) => count === 0)) return;
    const acknowledged = await Promise.all(
      primaries.map((node, index) => (wanted[index]! > 0 ? node.wait(wanted[index]!, options.waitTimeoutMs ?? 100) : 0)),
    );
    const short = acknowledged.filter((count, index) => Number(count) < wanted[index]!).length;
    if (short > 0 || primaries.length < served.size) {
      throw new DependencyError('redis', 'unavailable', `WAIT: ${short} of ${served.size} primaries without their replicas acknowledging`);
    }
  }

  return {
    client,
    markPaused: (campaignIds) =>
      timedCall(
        options.metrics,
        'redis',
        'mark_campaigns_paused',
        async () => {
          await connected();
          // The replicas to wait for are known once INFO has been asked once (at start, bounded by the command time-out).
          if (configuredReplicas === 'connected') await watch.known();
          if (client instanceof Cluster) return markPausedInCluster(client, campaignIds);
          const waitReplicas = replicasFor();
          const results =
            waitReplicas > 0
              ? await pausedAndReplicated(client, campaignIds, waitReplicas)
              : await client.markCampaignsPaused(campaignIds.length, ...campaignIds.map(campaignKey));
          if (!Array.isArray(results) || results.length !== campaignIds.length) {
            throw new DependencyError('redis', 'bad_response', 'incomplete answer');
          }
          return { confirmed: campaignIds.filter((_, index) => results[index] === 1) };
        },
        redisFailure,
      ),
    onFailover: (listener) => watch.onFailover(listener),
    async close() {
      watch.stop();
      await client.quit().catch(() => client.disconnect());
    },
  };
}
