import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { Redis } from 'ioredis';

/** A redis-server of the test's own on `port` (loopback, nothing saved to disk); `args` add to its options. */
export function spawnRedisServer(port: number, ...args: string[]): ChildProcess {
  return spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...args], {
    stdio: 'ignore',
  });
}

/**
 * A client of a server started by spawnRedisServer, without the run's key prefix; it retries until
 * the server listens (commands are queued meanwhile) and reports no errors of its own.
 */
export function redisAdmin(port: number): Redis {
  const admin = new Redis({ port, host: '127.0.0.1', retryStrategy: () => 100 });
  admin.on('error', () => undefined);
  return admin;
}

/** Kills a server started by spawnRedisServer and waits for it to exit. */
export async function killRedisServer(server: ChildProcess | undefined): Promise<void> {
  if (!server) return;
  server.kill('SIGKILL');
  await once(server, 'exit').catch(() => undefined);
}
