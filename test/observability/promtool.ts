import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);
// Debian package `prometheus`; PROMTOOL points elsewhere when needed.
const promtool = process.env.PROMTOOL ?? 'promtool';

/** Runs promtool and resolves with its output; rejects with the whole output when it fails. */
export async function promtoolRun(...args: string[]): Promise<string> {
  try {
    const { stdout, stderr } = await run(promtool, args, { timeout: 60_000 });
    return stdout + stderr;
  } catch (error) {
    const e = error as { code?: string | number; stdout?: string; stderr?: string; message: string };
    if (e.code === 'ENOENT') throw new Error(`${promtool} not found: install the Debian package "prometheus" (or set PROMTOOL)`);
    throw new Error(`promtool ${args.join(' ')} failed (exit ${e.code}):\n${e.stdout ?? ''}${e.stderr ?? ''}`);
  }
}
