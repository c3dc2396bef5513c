import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { freePort } from './process.js';
import { patience, waitFor } from './wait.js';

const run = promisify(execFile);
/**
 * A bound on one `redis-cli --cluster` command: it waits without end for a node that stopped
 * answering, and a chaos run once hung on one until its test's time-out (seed 623307045 in CI).
 * Killed, it rejects; a resharding cut half-way leaves slots open, which `fix` closes.
 */
const cliBound = () => ({ timeout: patience(30_000), killSignal: 'SIGKILL' as const });

/**
 * A real Redis Cluster of `redis-server` processes on free ports, made with `redis-cli --cluster
 * create`: `primaries` primaries, each with `replicas` replicas, a short node time-out so that a
 * killed primary's replica takes over within a couple of seconds. Every node keeps its cluster
 * state and its append-only file in a temporary folder, removed by close().
 */
export async function startRedisCluster(options: { primaries?: number; replicas?: number; nodeTimeoutMs?: number } = {}) {
  const primaries = options.primaries ?? 3;
  const replicas = options.replicas ?? 0;
  const dir = mkdtempSync(join(tmpdir(), 'pas-redis-cluster-'));
  const ports: number[] = [];
  const servers = new Map<number, ChildProcess>();
  /** Whether the node on this port is still running. */
  const alive = (port: number) => servers.get(port)!.exitCode === null && servers.get(port)!.signalCode === null;
  // Each node keeps an append-only file of its own, written through on every write: a node killed
  // and started again comes back with its data, as a managed node does, never as an empty primary
  // of its slots (which would wipe its replica too when it syncs).
  const start = (port: number) => {
    const nodeDir = join(dir, String(port));
    mkdirSync(nodeDir, { recursive: true });
    const server = spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'yes',
        '--appendfsync',
        'always',
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        join(dir, `nodes-${port}.conf`),
        '--cluster-node-timeout',
        String(options.nodeTimeoutMs ?? 1_000),
        '--dir',
        nodeDir,
      ],
      { stdio: 'ignore' },
    );
    servers.set(port, server);
  };
  for (let i = 0; i < primaries * (1 + replicas); i += 1) {
    const port = await freePort();
    ports.push(port);
    start(port);
  }
  const admin = (port: number) => {
    const client = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => 100, maxRetriesPerRequest: 1 });
    client.on('error', () => undefined);
    return client;
  };
  const info = async (port: number, section: string): Promise<string> => {
    const client = admin(port);
    try {
      await client.connect();
      return String(await client.call('CLUSTER', section));
    } finally {
      client.disconnect();
    }
  };
  await waitFor(
    async () => {
      // A node that exited could not bind its port (another test suite took it since freePort):
      // it starts again on another one.
      for (const [at, port] of ports.entries()) {
        if (servers.get(port)?.exitCode === null) continue;
        servers.delete(port);
        const again = await freePort();
        ports[at] = again;
        start(again);
      }
      return (
        await Promise.all(
          ports.map((port) =>
            info(port, 'INFO').then(
              () => true,
              () => false,
            ),
          ),
        )
      ).every(Boolean);
    },
    {
      timeoutMs: patience(10_000),
      intervalMs: 50,
      failure: () => 'the cluster nodes did not start',
    },
  );
  await run('redis-cli', [
    '--cluster',
    'create',
    ...ports.map((port) => `127.0.0.1:${port}`),
    '--cluster-replicas',
    String(replicas),
    '--cluster-yes',
  ]);
  /** Each node as the last health check saw it: what a failure names. */
  const seen = new Map<number, string>();
  const healthy = async () => {
    const live = ports.filter((port) => alive(port));
    for (const port of ports)
      if (!live.includes(port)) seen.set(port, `exited (${servers.get(port)!.exitCode ?? servers.get(port)!.signalCode})`);
    const states = await Promise.all(live.map((port) => info(port, 'INFO').catch(() => '')));
    for (const [at, port] of live.entries()) {
      const fields = Object.fromEntries(
        states[at]!.split('\n')
          .map((line) => line.trim().split(':'))
          .filter((pair) => pair.length === 2),
      );
      seen.set(
        port,
        states[at]
          ? `${fields.cluster_state} (slots ok ${fields.cluster_slots_ok}, fail ${fields.cluster_slots_fail}, known nodes ${fields.cluster_known_nodes})`
          : 'no answer',
      );
    }
    return states.every((state) => state.includes('cluster_state:ok'));
  };
  const unhealthy = (what: string) => () => `${what}: ${[...seen].map(([port, state]) => `${port} ${state}`).join('; ')}`;
  await waitFor(healthy, { timeoutMs: patience(20_000), intervalMs: 100, failure: unhealthy('the new cluster did not become healthy') });
  // Every replica in sync with its primary: one that never synced would not take over.
  const inSync = async (port: number) => {
    const client = admin(port);
    try {
      await client.connect();
      const replication = await client.info('replication');
      return replication.includes('role:master') || replication.includes('master_link_status:up');
    } finally {
      client.disconnect();
    }
  };
  await waitFor(async () => (await Promise.all(ports.map((port) => inSync(port).catch(() => false)))).every(Boolean), {
    timeoutMs: 20_000,
    intervalMs: 100,
    failure: () => 'the replicas did not sync with their primaries',
  });

  /** node id, port and role of every node, as one live node sees them. */
  const nodes = async () => {
    const live = ports.find((port) => alive(port))!;
    return (await info(live, 'NODES'))
      .trim()
      .split('\n')
      .map((line) => {
        const [id, address, flags, primaryId] = line.split(' ');
        return {
          id: id!,
          port: Number(address!.split('@')[0]!.split(':')[1]),
          primary: flags!.includes('master'),
          failed: flags!.split(',').includes('fail'),
          /** A replica's primary ('-' for a primary). */
          primaryId: primaryId!,
        };
      });
  };

  return {
    ports,
    /** Seed nodes for REDIS_URL with REDIS_CLUSTER=true. */
    url: ports.map((port) => `redis://127.0.0.1:${port}`).join(','),
    nodes,
    /** Waits until every live node says cluster_state:ok. */
    healthy: () =>
      waitFor(healthy, { timeoutMs: patience(30_000), intervalMs: 100, failure: unhealthy('the cluster did not become healthy again') }),
    /** The primary that serves this key's slot. */
    async primaryOf(key: string): Promise<number> {
      const client = admin(ports[0]!);
      try {
        await client.connect();
        const slot = Number(await client.call('CLUSTER', 'KEYSLOT', key));
        const shards = (await client.call('CLUSTER', 'SLOTS')) as Array<[number, number, [string, number]]>;
        return shards.find(([from, to]) => slot >= from && slot <= to)![2][1];
      } finally {
        client.disconnect();
      }
    },
    async kill(port: number): Promise<void> {
      const server = servers.get(port)!;
      server.kill('SIGKILL');
      await once(server, 'exit').catch(() => undefined);
    },
    /** Waits until a replica of the (killed) primary `primaryId` has taken its place. */
    promotedAfter: (primaryId: string) =>
      waitFor(
        async () => {
          // Marked failed by the others (not only suspected), and every slot served again.
          const victim = (await nodes().catch(() => [])).find((node) => node.id === primaryId);
          return victim?.failed === true && (await healthy());
        },
        { timeoutMs: 20_000, intervalMs: 100, failure: () => `no replica took over from ${primaryId}` },
      ),
    /** Starts a killed node again on its port; its cluster state brings it back (a replica, if it was failed over). */
    restart(port: number): void {
      start(port);
    },
    /** `redis-cli --cluster fix`: closes any slot a resharding left open half-way. */
    async fix(): Promise<void> {
      const live = ports.find((port) => alive(port))!;
      await run('redis-cli', ['--cluster', 'fix', `127.0.0.1:${live}`, '--cluster-yes'], cliBound()).catch(() => undefined);
    },
    /** Moves `slots` slots from one primary to another with `redis-cli --cluster reshard`. */
    async reshard(fromPort: number, toPort: number, slots: number): Promise<void> {
      const all = await nodes();
      const from = all.find((node) => node.port === fromPort)!.id;
      const to = all.find((node) => node.port === toPort)!.id;
      await run(
        'redis-cli',
        [
          '--cluster',
          'reshard',
          `127.0.0.1:${toPort}`,
          '--cluster-from',
          from,
          '--cluster-to',
          to,
          '--cluster-slots',
          String(slots),
          '--cluster-yes',
          '--cluster-pipeline',
          '50',
        ],
        cliBound(),
      );
    },
    async close(): Promise<void> {
      for (const server of servers.values()) server.kill('SIGKILL');
      await Promise.all(
        [...servers.values()].map((server) => (server.exitCode === null && server.signalCode === null ? once(server, 'exit') : undefined)),
      );
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
