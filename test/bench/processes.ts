// Child processes of the benchmark: the service and each floor run in their own process, pinned to
// core 0 when taskset is there (the benchmark itself, which generates the load, pins itself to
// core 1), so that every figure of one run is taken under the same conditions.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';

export const root = fileURLToPath(new URL('../..', import.meta.url));

function hasTaskset(): boolean {
  try {
    execFileSync('taskset', ['-V'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Pinning needs taskset and two cores: server on core 0, load generator (this process) on core 1. */
export const pinning = cpus().length >= 2 && hasTaskset();

/** Pins every thread of this process (the load generator) to core 1; later threads inherit it. */
export function pinLoadGenerator(): void {
  if (pinning) execFileSync('taskset', ['-a', '-p', '-c', '1', String(process.pid)], { stdio: 'ignore' });
}

export interface Child {
  name: string;
  child: ChildProcess;
  /** Milliseconds from spawn to the first 200 of the readiness URL. */
  startToReadyMs: number;
  /** Resident set size at that moment, from /proc/<pid>/status. */
  rssAtReadyMiB: number;
  /** The process's stdout and stderr, kept in a file so a failure can show them. */
  logFile: string;
  stop(): Promise<number | null>;
}

/** VmRSS (current) and VmHWM (peak) of a process, in MiB. */
export function memoryOf(pid: number): { rssMiB: number; peakMiB: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? Number.NaN);
  return { rssMiB: Math.round((kib('VmRSS') / 1024) * 10) / 10, peakMiB: Math.round((kib('VmHWM') / 1024) * 10) / 10 };
}

function getStatus(url: string): Promise<number> {
  return new Promise((resolve) => {
    const req = request(url, { agent: false, timeout: 1_000 }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', () => resolve(0));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

export function tail(logFile: string, lines = 40): string {
  try {
    return readFileSync(logFile, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/**
 * Starts `node <args>` (pinned to core 0 when possible) and polls `readyUrl` every 5 ms until it
 * answers 200; the time from spawn to that answer is the process's start-to-ready time.
 */
export async function startPinned(options: {
  name: string;
  args: string[];
  env: Record<string, string>;
  readyUrl: string;
  logFile: string;
  timeoutMs?: number;
}): Promise<Child> {
  const out = openSync(options.logFile, 'a');
  const [command, args] = pinning ? ['taskset', ['-c', '0', process.execPath, ...options.args]] : [process.execPath, options.args];
  const started = performance.now();
  const child = spawn(command, args, { cwd: root, env: options.env, stdio: ['ignore', out, out] });
  closeSync(out);
  let exitCode: number | null | undefined;
  const exited = once(child, 'exit').then(([code]) => {
    exitCode = code as number | null;
    return exitCode;
  });
  const deadline = started + (options.timeoutMs ?? 20_000);
  for (;;) {
    if (exitCode !== undefined) throw new Error(`${options.name} exited with ${exitCode} before it was ready:\n${tail(options.logFile)}`);
    if ((await getStatus(options.readyUrl)) === 200) break;
    if (performance.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`${options.name} was not ready within ${options.timeoutMs ?? 20_000} ms:\n${tail(options.logFile)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const startToReadyMs = Math.round(performance.now() - started);
  const { rssMiB } = memoryOf(child.pid!);
  return {
    name: options.name,
    child,
    startToReadyMs,
    rssAtReadyMiB: rssMiB,
    logFile: options.logFile,
    async stop() {
      if (exitCode === undefined) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}
