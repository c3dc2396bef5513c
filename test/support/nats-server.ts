import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { freePort } from './process.js';
import { waitFor } from './wait.js';

/** A message on the events stream, as a consumer sees it. */
export interface StreamedEvent {
  seq: number;
  subject: string;
  msgId: string | undefined;
  /** The message's bytes as UTF-8 text. */
  data: string;
  event: {
    id: string;
    type: string;
    source: string;
    subject: string;
    time: string;
    specversion: string;
    datacontenttype: string;
    data: { agentId: string; networkId: string; enabled: boolean; changeId: number; pausedCampaignCount?: number };
  };
}

/**
 * A nats-server of the test file's own (the Debian package's binary), with JetStream in a
 * temporary store, on a free loopback port: `stop()` and `start()` again keep the port and the
 * store, as a broker that restarts does.
 */
export async function startNatsServer() {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'pas-nats-'));
  const conf = join(dir, 'nats.conf');
  writeFileSync(conf, `listen: 127.0.0.1:${port}\njetstream {\n  store_dir: "${join(dir, 'store')}"\n}\n`);
  let child: ChildProcess | undefined;
  const url = `nats://127.0.0.1:${port}`;

  async function start(): Promise<void> {
    const output: string[] = [];
    const server = spawn('nats-server', ['-c', conf], { stdio: ['ignore', 'pipe', 'pipe'] });
    child = server;
    for (const stream of [server.stdout!, server.stderr!]) stream.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    await waitFor(
      () => {
        if (server.exitCode !== null) throw new Error(`nats-server exited:\n${output.join('')}`);
        return output.join('').includes('Server is ready');
      },
      { timeoutMs: 10_000, intervalMs: 25, failure: () => `nats-server did not start:\n${output.join('')}` },
    );
  }

  async function stop(): Promise<void> {
    const server = child;
    child = undefined;
    if (!server || server.exitCode !== null) return;
    const exited = new Promise((resolve) => server.once('exit', resolve));
    server.kill('SIGTERM');
    await exited;
  }

  /** Every message of `stream`, in stream order. */
  async function messages(stream: string): Promise<StreamedEvent[]> {
    const nc = await connect({ servers: url });
    try {
      const manager = await jetstreamManager(nc);
      const info = await manager.streams.info(stream);
      const found: StreamedEvent[] = [];
      for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq += 1) {
        const message = await manager.streams.getMessage(stream, { seq }).catch(() => null);
        if (!message) continue;
        const data = new TextDecoder().decode(message.data);
        found.push({
          seq: message.seq,
          subject: message.subject,
          msgId: message.header?.get('Nats-Msg-Id') || undefined,
          data,
          event: JSON.parse(data),
        });
      }
      return found;
    } finally {
      await nc.close();
    }
  }

  await start();
  return {
    url,
    port,
    /** The running server's process id (undefined while stopped). */
    get pid() {
      return child?.exitCode === null ? child.pid : undefined;
    },
    start,
    stop,
    messages,
    /** Stops the server and deletes its store. */
    async close(): Promise<void> {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export type NatsServer = Awaited<ReturnType<typeof startNatsServer>>;
