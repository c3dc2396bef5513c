// Floors (`--only=floors`; the bare one also with the 401 and 429 paths): the same work as the
// service's without the service, each in a process of its own (test/bench/floor-server.ts).
import { join } from 'node:path';
import { freePort } from '../../support/process.js';
import type { BenchContext } from '../context.js';
import { phase, stop, unreachableRateLimit } from '../context.js';
import { measure, statusPosts } from '../load.js';
import { startPinned } from '../processes.js';
import { measureEnable } from './enable.js';

export type FloorName = 'bare' | 'pg' | 'slonik' | 'update' | 'enable';

/** Starts one floor server, loads it and records its figure under `figure`. */
export async function floor(ctx: BenchContext, name: FloorName, figure: string): Promise<void> {
  await phase(ctx, figure, async () => {
    const port = await freePort();
    const child = await startPinned({
      name: `floor-${name}`,
      args: ['--import', 'tsx', 'test/bench/floor-server.ts'],
      readyUrl: `http://127.0.0.1:${port}/readyz`,
      logFile: join(ctx.workDir, `floor-${name}.log`),
      env: {
        PATH: process.env.PATH ?? '',
        FLOOR: name,
        PORT: String(port),
        DATABASE_URL: ctx.databaseUrl,
        REDIS_URL: ctx.redisUrl,
        REDIS_KEY_PREFIX: `${ctx.prefix}floor:`,
        RATE_LIMIT_MAX: unreachableRateLimit,
        FLOOR_KEYS: JSON.stringify(ctx.partners),
      },
    });
    ctx.children.push(child);
    const url = `http://127.0.0.1:${port}/floor`;
    if (name === 'enable') await measureEnable(ctx, figure, url);
    else {
      const posts = name === 'update';
      const result = await measure(
        figure,
        posts ? statusPosts(url, [ctx.main.key], ctx.enableAgents, true) : { url },
        posts ? ctx.options.enablePlan : ctx.options.loadPlan,
      );
      ctx.results.failures.push(...result.problems);
      ctx.results.loads[figure] = result.figure;
    }
    await stop(ctx, child);
  });
}

/** The database floors, ahead of the service's enable. */
export async function databaseFloors(ctx: BenchContext): Promise<void> {
  await floor(ctx, 'pg', 'floor: SELECT 1 via node-postgres');
  await floor(ctx, 'slonik', 'floor: SELECT 1 via slonik (service pool)');
  await floor(ctx, 'update', 'floor: enable UPDATE alone via node-postgres');
  await floor(ctx, 'enable', 'floor: enable (rate-limit EVALSHA + durable write) via node-postgres');
}
