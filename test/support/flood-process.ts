// A flood of requests from a process of its own, so that reading its answers (a 277 KB document
// 200 times a second is 55 MB/s) never runs on the event loop of the test that times another
// client's requests: the latency a test measures is then the service's, not its own process's.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));

// The flooding process: `perTick` requests every 10 ms over `connections` kept-alive connections,
// its answers counted by status (0: no answer) and printed as one JSON line every 50 ms.
const script = `
import { Pool } from 'undici';
const [origin, path, connections, perTick] = process.argv.slice(1);
const pool = new Pool(origin, { connections: Number(connections) });
const statuses = {};
const count = (status) => { statuses[status] = (statuses[status] ?? 0) + 1; };
let on = false;
let tick;
process.stdin.setEncoding('utf8');
process.stdin.on('data', (text) => {
  for (const word of text.split('\\n').filter(Boolean)) {
    if (word === 'start' && !on) {
      on = true;
      tick = setInterval(() => {
        for (let i = 0; i < Number(perTick); i += 1)
          pool.request({ method: 'GET', path }).then(async (r) => { await r.body.dump(); count(r.statusCode); }, () => count(0));
      }, 10);
    } else if (word === 'stop') {
      on = false;
      clearInterval(tick);
    }
  }
});
process.stdin.on('end', () => { clearInterval(tick); pool.close().finally(() => process.exit(0)); });
setInterval(() => console.log(JSON.stringify({ statuses, inFlight: pool.stats.size })), 50);
`;

export interface FloodProcess {
  /** Starts (or resumes) the flood. */
  start(): void;
  /** Pauses it (requests under way still finish). */
  pause(): void;
  /** Answers by status so far, as last reported. */
  statuses(): Map<number, number>;
  /** Answers received so far, and requests still under way, as last reported. */
  served(): number;
  inFlight(): number;
  close(): Promise<void>;
}

export async function startFloodProcess(options: {
  origin: string;
  path: string;
  connections: number;
  perTick: number;
}): Promise<FloodProcess> {
  const child = spawn(
    process.execPath,
    ['--input-type=module', '-e', script, options.origin, options.path, String(options.connections), String(options.perTick)],
    { cwd: root, stdio: ['pipe', 'pipe', 'inherit'] },
  );
  let last: { statuses: Record<string, number>; inFlight: number } = { statuses: {}, inFlight: 0 };
  const lines = createInterface({ input: child.stdout! });
  lines.on('line', (line) => {
    last = JSON.parse(line) as typeof last;
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve) => lines.once('line', () => resolve()));
  const statuses = () => new Map(Object.entries(last.statuses).map(([status, n]) => [Number(status), n]));
  return {
    start: () => child.stdin!.write('start\n'),
    pause: () => child.stdin!.write('stop\n'),
    statuses,
    served: () => [...statuses().values()].reduce((sum, n) => sum + n, 0),
    inFlight: () => last.inFlight,
    async close() {
      child.stdin!.end();
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
