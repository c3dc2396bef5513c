// Chaos: three built replicas under partner load (single changes, and one request in five a bulk
// change of 2 to 6 agents whose disables share their pause calls), the platform creating campaigns
// for enabled agents all along, while faults come and go at random (SIGKILL,
// SIGTERM, a black-holed database connection, rows held by platform transactions, spend management
// failing, hanging or slow; with one Redis server a Redis cut and Redis read-only, with a Redis
// Cluster a primary killed (its replica takes over) and slots moved), for a bounded time; then
// everything heals and the invariants of docs/interfaces.md §7 and §9 must hold:
// - the three stores agree on every campaign, both ways: paused in the database implies paused in
//   spend management and Redis, and nothing is paused there while it runs in the database (what a
//   run sent is settled through the call record, whatever became of the run);
// - every disabled agent converges within 60 s of healing, with no request;
// - no pause call starts after an enable answered (unless a later disable was recorded; a call
//   sent again with its own key, to complete it, is not a new one): no first send after an enable,
//   and no call answered with a failure sent again after it;
// - spend management holds its keys strictly (the simulator's 422 for a key that comes back with
//   other campaigns): every key is sent with one list of campaigns, and none is answered 422;
// - exactly one change row per request that reached its statement;
// - every committed change and completion has exactly one event on the stream, in order per agent.
// The seed is printed so that a failure can be replayed: CHAOS_SEED=<n> CHAOS_SECONDS=<s>;
// CHAOS_SPEND_MANAGEMENT_MAX_CONCURRENCY=<n> runs the replicas with that many spend-management slots.
// The suite is defined here once and run by one test file per Redis topology.
import { randomInt, randomUUID } from 'node:crypto';
import { Cluster, Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { disagreements } from './agreement.js';
import { newApiKey, testDatabase } from './data.js';
import { databaseUrl } from './database-url.js';
import { eventStreamProblems } from './event-stream-check.js';
import { type NatsServer, startNatsServer } from './nats-server.js';
import { postBatch, postStatus } from './partner.js';
import { startPgBouncer } from './pgbouncer.js';
import { freePort, startServiceProcess } from './process.js';
import { processEnvironment } from './process-environment.js';
import { startRedisCluster } from './redis-cluster.js';
import { killRedisServer, redisAdmin, spawnRedisServer } from './redis-server.js';
import { startTcpProxy } from './tcp-proxy.js';
import { patience, within } from './wait.js';

/** mulberry32: a small seeded generator, so that a run's choices can be replayed. */
function generator(start: number) {
  let state = start >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
  return {
    next,
    int: (min: number, max: number) => min + Math.floor(next() * (max - min + 1)),
    pick: <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!,
  };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
/** Where the replicas' campaign state lives, and the Redis faults that fit it. */
interface RedisStage {
  /** REDIS_URL (and REDIS_CLUSTER) for one replica; a single server is reached through a proxy of the replica's own. */
  forReplica(): Promise<{ env: Record<string, string>; cut?: () => void; restore?: () => void; close: () => Promise<void> }>;
  faults: readonly string[];
  fault(
    kind: string,
    hold: number,
    replica: { cut?: () => void; restore?: () => void },
    pick: <T>(items: readonly T[]) => T,
  ): Promise<void>;
  /** Undoes every fault, and waits until Redis is whole again. */
  heal(): Promise<void>;
  /** Reads campaign hashes as the service writes them (the run's key prefix). */
  reader: Redis | Cluster;
  close(): Promise<void>;
}

/** One redis-server: faults are a replica's connection cut and the server turned read-only. */
async function singleServer(): Promise<RedisStage> {
  const port = await freePort();
  const server = spawnRedisServer(port);
  const admin = redisAdmin(port);
  await admin.ping();
  const reader = new Redis({ port, host: '127.0.0.1', keyPrefix: inject('redisKeyPrefix'), retryStrategy: () => 100 });
  reader.on('error', () => undefined);
  const heals: Array<() => void> = [];
  return {
    reader,
    faults: ['redis_cut', 'redis_read_only'],
    async forReplica() {
      const proxy = await startTcpProxy({ host: '127.0.0.1', port });
      heals.push(() => proxy.restore());
      return { env: { REDIS_URL: proxy.url }, cut: () => proxy.cut(), restore: () => proxy.restore(), close: () => proxy.close() };
    },
    async fault(kind, hold, replica) {
      if (kind === 'redis_cut') {
        replica.cut?.();
        await sleep(hold);
        replica.restore?.();
      } else {
        await admin.replicaof('127.0.0.1', await freePort());
        await sleep(hold);
        await admin.replicaof('NO', 'ONE');
      }
    },
    async heal() {
      await admin.replicaof('NO', 'ONE');
      for (const heal of heals) heal();
    },
    async close() {
      admin.disconnect();
      reader.disconnect();
      await killRedisServer(server);
    },
  };
}

/**
 * A Redis Cluster of three primaries with a replica each: faults are a primary killed (its replica
 * takes over; the killed node comes back as a replica when healed) and slots moved between two
 * primaries (redis-cli --cluster reshard). One cluster change at a time, so the cluster stays whole.
 */
async function clusterOfServers(): Promise<RedisStage> {
  const cluster = await startRedisCluster({ primaries: 3, replicas: 1 });
  const reader = new Cluster(
    cluster.ports.map((port) => ({ host: '127.0.0.1', port })),
    { keyPrefix: inject('redisKeyPrefix'), scaleReads: 'master' },
  );
  reader.on('error', () => undefined);
  const killed = new Set<number>();
  let changing = false;
  return {
    reader,
    faults: ['redis_failover', 'redis_reshard'],
    async forReplica() {
      // A batch counts as paused in Redis once a replica has it: a failover keeps it (§9).
      const env = { REDIS_URL: cluster.url, REDIS_CLUSTER: 'true', REDIS_WAIT_REPLICAS: '1', REDIS_WAIT_TIMEOUT_MS: '200' };
      return { env, close: async () => undefined };
    },
    async fault(kind, hold, _replica, pick) {
      if (changing) return;
      changing = true;
      try {
        const nodes = await cluster.nodes();
        const live = nodes.filter((node) => !node.failed && !killed.has(node.port));
        const primaries = live.filter((node) => node.primary);
        if (kind === 'redis_failover') {
          // Only a primary whose replica is alive: the cluster must stay whole.
          const covered = primaries.filter((primary) => live.some((node) => node.primaryId === primary.id));
          if (covered.length === 0) return;
          const victim = pick(covered);
          killed.add(victim.port);
          await cluster.kill(victim.port);
          // Back only once its replica has taken over: a node without persistence that restarted
          // first would come back as the primary of its slots, empty (an operator's error that no
          // client can repair).
          await cluster.promotedAfter(victim.id);
          await sleep(hold);
          cluster.restart(victim.port);
          killed.delete(victim.port);
        } else if (primaries.length >= 2 && killed.size === 0) {
          const from = pick(primaries);
          const to = pick(primaries.filter((node) => node !== from));
          await cluster.reshard(from.port, to.port, 300);
        }
      } finally {
        changing = false;
      }
    },
    async heal() {
      for (const port of killed) cluster.restart(port);
      killed.clear();
      await cluster.fix();
      await cluster.healthy();
    },
    async close() {
      reader.disconnect();
      await cluster.close();
    },
  };
}

/**
 * The chaos suite against one Redis topology, and PostgreSQL reached directly or through a
 * PgBouncer in transaction mode (`pooler`: every replica with DATABASE_POOLER=transaction, four
 * server connections shared by all of them). `defaultSeconds`: the chaos's length when
 * CHAOS_SECONDS is not set (the short form that runs in npm test).
 */
export function chaosSuite(topology: 'single' | 'cluster', defaultSeconds: number, database: 'direct' | 'pooler' = 'direct'): void {
  const chaosSeconds = Number(process.env.CHAOS_SECONDS ?? defaultSeconds);
  const seed = Number(process.env.CHAOS_SEED ?? randomInt(1, 2 ** 31 - 1));
  const db = testDatabase();

  interface Partner {
    key: string;
    networkId: string;
    name: string;
    agents: string[];
  }

  interface Sent {
    agentId: string;
    enabled: boolean;
    requestId: string;
    sentAt: number;
    answeredAt?: number;
    status?: number;
    body?: Record<string, unknown>;
  }

  let redis: RedisStage;
  let bouncer: Awaited<ReturnType<typeof startPgBouncer>> | undefined;
  let nats: NatsServer;
  const started: Array<{ close(): Promise<void>; sends(into: Map<string, number[]>): void }> = [];
  let environment: Awaited<ReturnType<typeof processEnvironment>>;
  const partners: Partner[] = [];
  const campaignsOf = new Map<string, string[]>();
  const agentOfCampaign = new Map<string, string>();

  beforeAll(async () => {
    redis = topology === 'cluster' ? await clusterOfServers() : await singleServer();
    if (database === 'pooler') {
      // What docs/operations.md asks of the SRE behind a pooler: the bounds on the service's role.
      const name = new URL(databaseUrl()).pathname.slice(1);
      for (const setting of ['statement_timeout', 'idle_in_transaction_session_timeout']) {
        await db.pool.query(`ALTER ROLE postgres IN DATABASE ${pg.escapeIdentifier(name)} SET ${setting} = 1000`);
      }
      bouncer = await startPgBouncer(databaseUrl(), { poolSize: 4 });
    }

    nats = await startNatsServer();
    const random = generator(seed);
    for (let n = 0; n < 2; n += 1) {
      // Networks that require approval: the platform can write no running campaign for a disabled
      // agent (the restriction triggers), which is what makes "disabled, so nothing runs" an
      // invariant. Without it a platform write after a disable's completion (the agent_lock fault)
      // left a running campaign and no pending disable, as the contract allows there: twice a run
      // "did not converge" (seeds 2087945056, 1982882717).
      const networkId = await db.network({ requireAgentApproval: true });
      const partner: Partner = { key: newApiKey(), networkId, name: `chaos-${n}`, agents: [] };
      // Eight agents of 0 to 400 campaigns, and sixteen small ones, so that bulk changes often find
      // several agents with campaigns still to pause and share calls between them.
      for (let a = 0; a < 24; a += 1) {
        const agentId = await db.agent(partner.networkId);
        const ids = await db.campaigns(agentId, a < 8 ? random.pick([0, 3, 40, 150, 250, 400]) : random.pick([2, 5, 10, 20]));
        campaignsOf.set(agentId, ids);
        for (const id of ids) agentOfCampaign.set(id, agentId);
        partner.agents.push(agentId);
      }
      partners.push(partner);
    }
    environment = await processEnvironment(
      partners.map(({ key, networkId, name }) => ({ key, networkId, name })),
      {
        OTEL_SDK_DISABLED: 'true',
        RATE_LIMIT_MAX: '0',
        DRAIN_DELAY_MS: '0',
        SHUTDOWN_TIMEOUT_MS: '3000',
        REQUEST_DEADLINE_MS: '5000',
        WORKER_LEASE_MS: '4000',
        WORKER_POLL_INTERVAL_MS: '300',
        WORKER_BACKOFF_BASE_MS: '200',
        WORKER_BACKOFF_MAX_MS: '2000',
        DATABASE_STATEMENT_TIMEOUT_MS: '1000',
        SPEND_MANAGEMENT_TIMEOUT_MS: '800',
        REDIS_COMMAND_TIMEOUT_MS: '300',
        BREAKER_RESET_TIMEOUT_MS: '1000',
        DISABLES_IN_FLIGHT_PER_NETWORK: '16',
        EVENTS_NATS_URL: nats.url,
        EVENTS_CREATE_STREAM: 'true',
        ...(process.env.CHAOS_SPEND_MANAGEMENT_MAX_CONCURRENCY
          ? { SPEND_MANAGEMENT_MAX_CONCURRENCY: process.env.CHAOS_SPEND_MANAGEMENT_MAX_CONCURRENCY }
          : {}),
      },
      { keepRequests: 100_000, strictKeys: true },
    );
  });

  afterAll(async () => {
    // Every replica started, whatever became of the test: none is left running after the file.
    await Promise.all(started.map((r) => r.close()));
    await environment?.close();
    await redis?.close();
    await bouncer?.close();
    await nats?.close();
    await db.close();
  });

  /**
   * One replica: the built service behind its own Redis and PostgreSQL proxies, restartable. The
   * database proxy black-holes a connection at the first statement of the service's own: a named
   * one (`pas_…`) directly, one naming the pending-disables table behind the pooler (its statements
   * are unnamed there).
   */
  async function replica(index: number) {
    const target = new URL(bouncer?.url ?? databaseUrl());
    const marker = bouncer ? 'pending_disables' : 'pas_';
    const pgProxy = await startTcpProxy({ host: target.hostname, port: Number(target.port || 5432) }, { marker, count: 0 });
    const redisOfReplica = await redis.forReplica();
    const viaProxy = new URL(bouncer?.url ?? databaseUrl());
    viaProxy.port = String(pgProxy.port);
    const pooled: Record<string, string> = bouncer ? { DATABASE_POOLER: 'transaction' } : {};
    // At debug level the service logs each spend-management call as it leaves (the judge of late sends below).
    const env = { ...environment.env, DATABASE_URL: viaProxy.toString(), ...pooled, ...redisOfReplica.env, LOG_LEVEL: 'debug' };
    let process: Awaited<ReturnType<typeof startServiceProcess>> | undefined = await startServiceProcess(env);
    /** The log lines of every process this replica has run, the killed ones included. */
    const outputs = [process.output];
    let restarting: Promise<void> | undefined;
    const handle = {
      index,
      pgProxy,
      redis: redisOfReplica,
      get baseUrl() {
        return process?.baseUrl;
      },
      /** When each call left (wall-clock ms, by idempotency key, in order), as far as the processes wrote it. */
      sends(into: Map<string, number[]>): void {
        for (const line of outputs.flat()) {
          if (!line.includes('"spend-management call sent"')) continue;
          const record = JSON.parse(line) as { callKey: string; time: string };
          into.set(record.callKey, [...(into.get(record.callKey) ?? []), Date.parse(record.time)]);
        }
      },
      async kill(signal: 'SIGKILL' | 'SIGTERM') {
        const current = process;
        if (!current || restarting) return;
        process = undefined;
        current.child.kill(signal);
        await current.exited;
      },
      restart(): Promise<void> {
        if (process) return Promise.resolve();
        restarting ??= startServiceProcess(env).then(
          (again) => {
            process = again;
            outputs.push(again.output);
            restarting = undefined;
          },
          () => {
            restarting = undefined;
          },
        );
        return restarting;
      },
      async close() {
        await restarting;
        await process?.stop();
        await pgProxy.close();
        await redisOfReplica.close();
      },
    };
    started.push(handle);
    return handle;
  }

  describe(`chaos with ${topology === 'cluster' ? 'a Redis Cluster' : 'one Redis server'}${database === 'pooler' ? ', through PgBouncer,' : ''} for ${chaosSeconds} s (seed ${seed})`, () => {
    it('keeps the invariants under random faults and converges once they heal', {
      timeout: patience((chaosSeconds + 300) * 1_000),
    }, async () => {
      console.log(
        `chaos (${topology}, ${database}) seed ${seed}; replay with CHAOS_SEED=${seed} CHAOS_SECONDS=${chaosSeconds}` +
          (process.env.CHAOS_SPEND_MANAGEMENT_MAX_CONCURRENCY
            ? ` CHAOS_SPEND_MANAGEMENT_MAX_CONCURRENCY=${process.env.CHAOS_SPEND_MANAGEMENT_MAX_CONCURRENCY}`
            : ''),
      );
      const random = generator(seed ^ 0x5eed);
      const replicas = await Promise.all([0, 1, 2].map(replica));
      const sim = environment.simulator.simulator;
      const sent: Sent[] = [];
      let batches = 0;
      const platform: pg.Client[] = [];
      const faultsDone: string[] = [];
      const startedAt = Date.now();
      const chaosEnd = startedAt + chaosSeconds * 1_000;

      async function send(): Promise<void> {
        const partner = random.pick(partners);
        const target = random.pick(replicas.filter((r) => r.baseUrl));
        if (!target?.baseUrl) {
          await sleep(50);
          return;
        }
        if (random.next() < 0.2) {
          await sendBatch(partner, target.baseUrl);
          return;
        }
        const agentId = random.pick(partner.agents);
        const enabled = random.next() < 0.4;
        const record: Sent = { agentId, enabled, requestId: randomUUID(), sentAt: Date.now() };
        sent.push(record);
        try {
          const response = await postStatus(target.baseUrl, partner.key, agentId, enabled, {
            headers: { 'x-request-id': record.requestId },
            signal: AbortSignal.timeout(10_000),
          });
          record.status = response.status;
          record.body = (await response.json()) as Record<string, unknown>;
          record.answeredAt = Date.now();
        } catch {
          // The replica died under the request: its outcome is unknown.
        }
      }

      /**
       * A bulk change of 2 to 6 of the partner's agents (docs/interfaces.md §16): each change is
       * recorded as its own request (its item's status and body), under the batch's request id.
       * A batch answered as a whole (a 4xx or 5xx) changed nothing, so each item carries that status.
       */
      async function sendBatch(partner: (typeof partners)[number], baseUrl: string): Promise<void> {
        const agentIds = [...new Set(Array.from({ length: random.int(2, 6) }, () => random.pick(partner.agents)))];
        const requestId = randomUUID();
        batches += 1;
        const records: Sent[] = agentIds.map((agentId) => ({ agentId, enabled: random.next() < 0.4, requestId, sentAt: Date.now() }));
        sent.push(...records);
        try {
          const response = await postBatch(
            baseUrl,
            partner.key,
            { changes: records.map(({ agentId, enabled }) => ({ agentId, enabled })) },
            { 'x-request-id': requestId },
            AbortSignal.timeout(10_000),
          );
          const body = (await response.json()) as { results?: Array<{ agentId: string; status: number; body: Record<string, unknown> }> };
          const answeredAt = Date.now();
          for (const [at, record] of records.entries()) {
            const item = response.status === 200 ? body.results?.[at] : undefined;
            if (response.status === 200 && item?.agentId !== record.agentId)
              throw new Error(`batch ${requestId}: result ${at} is not its change's`);
            Object.assign(record, item ? { status: item.status, body: item.body } : { status: response.status, body }, { answeredAt });
          }
        } catch (error) {
          if ((error as Error).message.startsWith('batch ')) throw error;
          // The replica died under the request: its outcome is unknown.
        }
      }

      async function fault(): Promise<void> {
        const r = random.pick(replicas);
        const hold = random.int(500, 3_000);
        const kind = random.pick([
          'kill',
          'term',
          'db_blackhole',
          'agent_lock',
          'campaign_lock',
          'spend_fail',
          'spend_hang',
          'spend_slow',
          ...redis.faults,
        ] as const);
        faultsDone.push(kind);
        switch (kind) {
          case 'kill':
          case 'term':
            await r.kill(kind === 'kill' ? 'SIGKILL' : 'SIGTERM');
            await sleep(random.int(200, 1_500));
            await r.restart();
            return;
          case 'db_blackhole':
            r.pgProxy.arm();
            return;
          case 'agent_lock':
          case 'campaign_lock': {
            const client = new pg.Client({ connectionString: databaseUrl() });
            client.on('error', () => undefined);
            await client.connect();
            // A platform session of its own: not bound by the time-outs set on the role for the
            // service behind the pooler.
            await client.query('SET statement_timeout = 0; SET idle_in_transaction_session_timeout = 0');
            platform.push(client);
            const agentId = random.pick(random.pick(partners).agents);
            await client.query('BEGIN');
            if (kind === 'agent_lock') {
              const id = randomUUID();
              // Refused (P0001) while the agent is disabled: the platform's write is undone, nothing held.
              const written = await client.query('INSERT INTO campaigns (campaign_id, agent_id) VALUES ($1, $2)', [id, agentId]).then(
                () => true,
                async (error: { code?: string }) => {
                  if (error.code !== 'P0001') throw error;
                  await client.query('ROLLBACK').catch(() => undefined);
                  return false;
                },
              );
              if (!written) return;
              campaignsOf.get(agentId)!.push(id);
              agentOfCampaign.set(id, agentId);
            } else {
              const ids = campaignsOf.get(agentId)!;
              if (ids.length > 0) await client.query('SELECT 1 FROM campaigns WHERE campaign_id = $1 FOR UPDATE', [random.pick(ids)]);
            }
            await sleep(hold);
            await client.query('COMMIT').catch(() => undefined);
            return;
          }
          case 'spend_fail':
          case 'spend_hang':
          case 'spend_slow':
            sim.setMode(kind === 'spend_fail' ? 'fail' : kind === 'spend_hang' ? 'hang' : 'slow', { delayMs: 300 });
            await sleep(hold);
            sim.setMode('ok');
            return;
          default:
            await redis.fault(kind, hold, r.redis, random.pick);
            return;
        }
      }

      // The platform keeps creating campaigns for enabled agents (refused, P0001, while an agent is
      // disabled), so that disables keep finding campaigns to pause, alone and in bulk.
      const creating = (async () => {
        while (Date.now() < chaosEnd) {
          const agentId = random.pick(random.pick(partners).agents);
          const ids = Array.from({ length: random.int(1, 5) }, () => randomUUID());
          const created = await db.pool
            .query('INSERT INTO campaigns (campaign_id, agent_id) SELECT unnest($1::uuid[]), $2', [ids, agentId])
            .then(
              () => true,
              (error: { code?: string }) => {
                // Refused for a disabled agent; or, on a busy machine, cancelled by the role's
                // statement_timeout (the pooler topology) or chosen as a deadlock victim: rolled back.
                if (!['P0001', '57014', '40P01'].includes(error.code ?? '')) throw error;
                return false;
              },
            );
          if (created) {
            campaignsOf.get(agentId)!.push(...ids);
            for (const id of ids) agentOfCampaign.set(id, agentId);
          }
          await sleep(random.int(20, 100));
        }
      })();
      const load = Array.from({ length: 4 }, async () => {
        while (Date.now() < chaosEnd) await send();
      });
      // Each fault that has not ended, with when it began: what a hung run names (below).
      const underWay = new Map<number, string>();
      const faults = (async () => {
        const running: Promise<void>[] = [];
        for (let n = 0; Date.now() < chaosEnd; n += 1) {
          const began = Date.now();
          running.push(
            fault()
              .catch(() => undefined)
              .finally(() => underWay.delete(n)),
          );
          // fault() has picked its kind before its first await.
          underWay.set(n, `${faultsDone.at(-1)} from ${((began - startedAt) / 1_000).toFixed(1)} s`);
          await sleep(random.int(300, 1_500));
        }
        await Promise.all(running);
      })();
      // Every step after the chaos is bounded and named: a step that hangs fails the test with its
      // name, not at the test's time-out with none (a cluster run once did, in CI).
      const elapsed = () => `${((Date.now() - startedAt) / 1_000).toFixed(1)} s in`;
      await within(
        Promise.all([...load, faults, creating]),
        patience(45_000) + chaosSeconds * 1_000,
        () => `seed ${seed}: faults still under way (${[...underWay.values()].join(', ')}), ${elapsed()}, faults ${faultsDone.join(' ')}`,
      );

      // Heal: every dependency back, every replica up.
      sim.setMode('ok');
      await within(redis.heal(), patience(60_000), () => `seed ${seed}: Redis not whole again, ${elapsed()}`);
      for (const client of platform) await client.end().catch(() => undefined);
      await within(
        Promise.all(replicas.map((r) => r.restart())),
        patience(45_000),
        () => `seed ${seed}: a replica did not start again, ${elapsed()}`,
      );
      const healedAt = Date.now();
      const statuses = new Map<string, number>();
      for (const { status } of sent) statuses.set(String(status ?? 'none'), (statuses.get(String(status ?? 'none')) ?? 0) + 1);
      console.log(
        `chaos: ${sent.length} changes (${batches} bulk requests among them; ${[...statuses].map(([status, n]) => `${n}× ${status}`).join(', ')}), faults ${faultsDone.join(' ')}`,
      );

      const agents = partners.flatMap((p) => p.agents);
      const latestChange = async () =>
        new Map(
          (
            await db.pool.query(
              'SELECT DISTINCT ON (agent_id) agent_id, enabled FROM agent_status_changes WHERE agent_id = ANY($1) ORDER BY agent_id, change_id DESC',
              [agents],
            )
          ).rows.map((row) => [row.agent_id as string, row.enabled as boolean]),
        );
      const unconverged = async () => {
        const latest = await latestChange();
        const pending = new Set(
          (await db.pool.query('SELECT agent_id FROM pending_disables WHERE agent_id = ANY($1)', [agents])).rows.map((r) => r.agent_id),
        );
        const running = new Set(
          (
            await db.pool.query('SELECT DISTINCT agent_id FROM campaigns WHERE agent_id = ANY($1) AND active AND NOT paused', [agents])
          ).rows.map((r) => r.agent_id),
        );
        return agents.filter((agentId) => latest.get(agentId) === false && (pending.has(agentId) || running.has(agentId)));
      };
      for (;;) {
        const left = await unconverged();
        if (left.length === 0) break;
        if (Date.now() - healedAt > 60_000) {
          // What the next reader needs: each agent's pending row (its attempts, last error, when it is
          // due and who holds it) and how many of its campaigns still run.
          const { rows } = await db.pool.query(
            `SELECT a.agent_id, p.attempts, p.last_error, round(extract(epoch FROM p.next_attempt_at - now()))::int AS due_in_s,
                    p.lease_owner, (SELECT count(*)::int FROM campaigns c WHERE c.agent_id = a.agent_id AND c.active AND NOT c.paused) AS running
             FROM unnest($1::text[]) AS a(agent_id) LEFT JOIN pending_disables p ON p.agent_id = a.agent_id`,
            [left],
          );
          throw new Error(`seed ${seed}: not converged 60 s after healing: ${JSON.stringify(rows)}`);
        }
        await sleep(250);
      }
      console.log(`chaos: converged ${Date.now() - healedAt} ms after healing`);

      // The three stores agree on every campaign, both ways (docs/interfaces.md §9): paused in the
      // database implies paused everywhere, and nothing is paused in spend management or Redis while
      // it runs in the database. What a run sent and could not settle is settled by the workers
      // through the call record, within the same 60 s.
      const allCampaigns = [...agentOfCampaign.keys()];
      const stores = { pool: db.pool, redis: redis.reader, isPausedInSpendManagement: (id: string) => sim.isPaused(id) };
      for (;;) {
        const left = await disagreements(stores, allCampaigns);
        const { rows: unsettled } = await db.pool.query('SELECT count(*)::int AS n FROM pause_calls');
        if (left.length === 0 && unsettled[0].n === 0) break;
        if (Date.now() - healedAt > 60_000) {
          throw new Error(
            `seed ${seed}: stores disagree 60 s after healing: ${JSON.stringify(left.slice(0, 5))} (${left.length}), ${unsettled[0].n} unsettled`,
          );
        }
        await sleep(250);
      }
      console.log(`chaos: the three stores agree ${Date.now() - healedAt} ms after healing`);

      // Every disabled agent is flagged.
      const latest = await latestChange();
      for (const [agentId, enabled] of latest) if (!enabled) expect(await db.agentApproved(agentId), agentId).toBe(false);

      // No pause call started after an enable answered 200, unless a disable was recorded after it.
      const { rows: changes } = await db.pool.query(
        'SELECT change_id::bigint AS change_id, agent_id, enabled, request_id FROM agent_status_changes WHERE agent_id = ANY($1) ORDER BY change_id',
        [agents],
      );
      // A request's answer for one agent: a batch's request id is each of its changes'.
      const answerKey = (requestId: string, agentId: string) => `${requestId}/${agentId}`;
      const answered = new Map(sent.filter((s) => s.answeredAt !== undefined).map((s) => [answerKey(s.requestId, s.agentId), s]));
      const violations: string[] = [];
      // When each call left the service, by key: a send is judged by that instant where every send of
      // its key was logged (a SIGKILL can lose the last quarter second of lines), else by its arrival.
      const logged = new Map<string, number[]>();
      for (const replica of started) replica.sends(logged);
      for (const times of logged.values()) times.sort((x, y) => x - y);
      const arrivals = new Map<string, number>();
      for (const call of sim.requests()) arrivals.set(call.idempotencyKey, (arrivals.get(call.idempotencyKey) ?? 0) + 1);
      const arrivalsSeen = new Map<string, number>();
      let judgedBySend = 0;
      /** Each key's first send: its campaigns and the status it was answered with. */
      const firstSends = new Map<string, { campaigns: string; status: number | undefined }>();
      const reusedKeys: string[] = [];
      let firstSendsAfterEnable = 0;
      let sharedCalls = 0;
      for (const call of sim.requests()) {
        const first = firstSends.get(call.idempotencyKey);
        if (!first) firstSends.set(call.idempotencyKey, { campaigns: call.campaignIds.join(), status: call.status });
        // Strict keys: a key comes back only with the campaigns of its first send, whole.
        if (call.keyReused || (first && first.campaigns !== call.campaignIds.join())) reusedKeys.push(call.idempotencyKey);
        const at = Date.parse(call.at);
        const nth = arrivalsSeen.get(call.idempotencyKey) ?? 0;
        arrivalsSeen.set(call.idempotencyKey, nth + 1);
        const sends = logged.get(call.idempotencyKey);
        const leftAt = sends?.length === arrivals.get(call.idempotencyKey) ? sends![nth] : undefined;
        if (leftAt !== undefined) judgedBySend += 1;
        // The enables a send must not follow. By the protocol a call leaves within CLAIM_CHECK_MAX_AGE_MS
        // of its claim check, and an enable answers only that long after its delete: a send logged after
        // an enable's 200 reached its client breaks it, to the millisecond. Judged by its arrival, a call
        // may come 250 ms after the 200: the margin covers the loopback hops and a loaded machine's
        // event-loop delay between the send and the simulator's handler.
        const after = (answeredAt: number) => (leftAt !== undefined ? answeredAt < leftAt : answeredAt + 250 < at);
        // A batch's shared call carries several agents' campaigns: each agent is held to the rule.
        const agentsOfCall = new Set(call.campaignIds.map((id) => agentOfCampaign.get(id)));
        if (agentsOfCall.size > 1) sharedCalls += 1;
        for (const agentId of agentsOfCall) {
          if (!agentId) continue;
          const ofAgent = changes.filter((c) => c.agent_id === agentId);
          // The latest enable whose 200 reached its client before the call left (or, unlogged, 250 ms
          // before it arrived).
          const enable = ofAgent
            .filter((c) => {
              const answer = answered.get(answerKey(c.request_id, c.agent_id));
              return c.enabled && answer?.status === 200 && after(answer.answeredAt!);
            })
            .at(-1);
          if (!enable) continue;
          const laterDisable = ofAgent.some((c) => !c.enabled && Number(c.change_id) > Number(enable.change_id));
          if (laterDisable) continue;
          // A call sent again with the key of an earlier one completes that call (its answer never
          // came): not a new pause call, and an enable does not stop it; unless its first send was
          // answered with a failure (it paused nothing: nothing to complete).
          if (!first) {
            firstSendsAfterEnable += 1;
            violations.push(
              `${agentId}: first send ${leftAt === undefined ? `arrived at ${call.at}` : `left at ${new Date(leftAt).toISOString()}`} after enable ${enable.request_id}`,
            );
          } else if (first.status !== undefined && first.status !== 200) {
            violations.push(`${agentId}: a call answered ${first.status} sent again at ${call.at} after enable ${enable.request_id}`);
          }
        }
      }
      console.log(
        `chaos: ${firstSends.size} keys (${sharedCalls} calls carried several agents), ${reusedKeys.length} reused with other campaigns, ${firstSendsAfterEnable} first sends after an enable; ${judgedBySend} of ${sim.requests().length} sends judged by when they left`,
      );
      expect(reusedKeys, `seed ${seed}`).toEqual([]);
      expect(sim.keysReused(), `seed ${seed}`).toBe(0);
      expect(violations, `seed ${seed}`).toEqual([]);
      // The judge by departure is there: the service still logs its calls at debug level.
      if (sim.requests().length > 0) expect(judgedBySend, `seed ${seed}: spend-management calls logged as they left`).toBeGreaterThan(0);

      // One change row per request that reached its statement; none for one that did not.
      const rowsPerRequest = new Map<string, number>();
      for (const change of changes) {
        const key = answerKey(change.request_id, change.agent_id);
        rowsPerRequest.set(key, (rowsPerRequest.get(key) ?? 0) + 1);
      }
      const wrongCounts: string[] = [];
      for (const request of sent) {
        const rows = rowsPerRequest.get(answerKey(request.requestId, request.agentId)) ?? 0;
        const reached =
          request.status === 200 ||
          request.status === 409 ||
          (request.status === 500 && !request.enabled && typeof request.body?.pausedCampaignCount === 'number');
        const refused = request.status !== undefined && request.status >= 400 && request.status < 500 && request.status !== 409;
        if (rows > 1 || (reached && rows !== 1) || (refused && rows !== 0)) {
          wrongCounts.push(`${request.requestId} (${request.status}): ${rows} rows`);
        }
      }
      expect(wrongCounts, `seed ${seed}`).toEqual([]);
      expect(sent.filter((s) => s.status === 200).length).toBeGreaterThan(0);

      // Every committed change and completion: one event on the stream, in order per agent.
      expect(await eventStreamProblems(db.pool, nats, 'PARTNER_AGENT_STATUS', agents), `seed ${seed}`).toEqual([]);
    });
  });
}
