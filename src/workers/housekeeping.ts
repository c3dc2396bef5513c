// The one housekeeping loop: the chores that keep the stores tidy and the gauges current (pruning,
// purges, the queue figures), kept apart from the poll loops that do the work, as pg-boss keeps
// its maintenance apart from its workers. A chore claims nothing and works no item: it runs on its
// own period, and a chore that fails is logged and tried again at its next turn.
import type { Logger } from 'pino';
import { type Clock, systemClock, type Timer } from '../clock.js';
import { sqlstateFields } from '../observability/dependency-calls.js';
import type { Metrics } from '../observability/metrics.js';

export interface Chore {
  /** Its name in logs and metrics (background_loop_failures_total{loop,stage}: loop is the housekeeping's name). */
  readonly name: string;
  /** How often it runs. */
  readonly everyMs: number;
  /** One turn; `stopped` says the service is stopping (a long chore stops between its statements). */
  run(stopped: () => boolean): Promise<void>;
}

/**
 * Runs each chore every `everyMs` (the first turn at start), one chore at a time so housekeeping
 * never holds more than one connection; a turn of the loop looks at every `tickMs` (by default the
 * shortest period of its chores; jittered) which chores are due. A service may keep more than one
 * (one per feature): each has its own `name` (default `housekeeping`) in its logs and metrics.
 */
export class Housekeeping {
  private readonly lastRun = new Map<string, number>();
  private readonly clock: Clock;
  private readonly tickMs: number;
  private readonly loopName: string;
  private timer: Timer | undefined;
  private turn: Promise<void> | undefined;
  private stopped = true;

  constructor(
    private readonly chores: readonly Chore[],
    private readonly parts: {
      log: Logger;
      metrics: Pick<Metrics, 'backgroundLoopFailures'>;
      clock?: Clock;
      /** Its name in logs, metrics and the resources (default `housekeeping`). */
      name?: string;
      /** How often it looks which chores are due (default: the shortest period), so that a chore runs close to its period. */
      tickMs?: number;
    },
  ) {
    this.clock = parts.clock ?? systemClock;
    this.loopName = parts.name ?? 'housekeeping';
    this.tickMs = Math.min(parts.tickMs ?? Number.POSITIVE_INFINITY, ...chores.map((chore) => chore.everyMs));
    for (const chore of chores) parts.metrics.backgroundLoopFailures.inc({ loop: this.loopName, stage: chore.name }, 0);
  }

  get name(): string {
    return this.loopName;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.tick();
  }

  /** Runs every chore now, due or not (tests and the operator's view). */
  async runNow(names?: readonly string[]): Promise<void> {
    await this.turn;
    for (const chore of this.chores) if (!names || names.includes(chore.name)) await this.runChore(chore);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.clock.clearTimer(this.timer);
    this.timer = undefined;
    await this.turn;
  }

  private tick(): void {
    if (this.stopped) return;
    this.turn = this.dueChores().finally(() => {
      this.turn = undefined;
      if (this.stopped) return;
      this.timer = this.clock.setTimer(() => this.tick(), this.tickMs * (0.5 + Math.random()));
    });
  }

  private async dueChores(): Promise<void> {
    for (const chore of this.chores) {
      if (this.stopped) return;
      const last = this.lastRun.get(chore.name);
      // A chore runs once its period has gone by, give or take the jitter of the ticks.
      if (last === undefined || this.clock.now() - last >= chore.everyMs * 0.9) await this.runChore(chore);
    }
  }

  private async runChore(chore: Chore): Promise<void> {
    this.lastRun.set(chore.name, this.clock.now());
    try {
      await chore.run(() => this.stopped);
    } catch (error) {
      this.parts.metrics.backgroundLoopFailures.inc({ loop: this.loopName, stage: chore.name });
      this.parts.log.warn(
        { loop: this.loopName, chore: chore.name, reason: (error as Error).message, ...sqlstateFields(error) },
        'housekeeping chore failed; trying again at its next turn',
      );
    }
  }
}
