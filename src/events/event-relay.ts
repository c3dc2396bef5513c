import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { sqlstateFields } from '../observability/dependency-calls.js';
import type { Metrics } from '../observability/metrics.js';
import type { Batch, BatchEvent, EventBatchStore, RelayRole } from '../stores/event-batches.js';
import type { EventOutbox } from '../stores/event-outbox.js';
import { isCloudEvent } from './cloud-event.js';
import { type EventPublisher, type PublishableEvent, PublishError } from './nats-publisher.js';

/** EVENTS_RELAY_*, EVENTS_RETENTION_MS and EVENTS_SOURCE (docs/operations.md). */
export interface RelaySettings {
  pollIntervalMs: number;
  /** Events published to NATS per step (a page of a batch), and the events a batch hands over in memory. */
  batchSize: number;
  /** How long a role's lease is this replica's: a replica that dies leaves it to another after it. */
  leaseMs: number;
  /** After a publish that failed, the NATS step waits this long. */
  retryDelayMs: number;
  /** Batches and completions stay this long before they are pruned. */
  retentionMs: number;
  /** The CloudEvents `source`. */
  source: string;
}

const statsIntervalMs = 5_000;
/**
 * The pause after a batch that was not full: a steady stream costs a statement or two a batch, and
 * the fewer batches the less the relay takes from the changes themselves. Measured beside the enable
 * load (`npm run bench -- --only=events`, alternated): 10 ms gave 3,407-3,452 enables/s with events
 * and a commit-to-acknowledgement p99 of 54-58 ms; 30 ms gives 3,631-3,714/s and 80-82 ms.
 */
const busyPauseMs = 30;
const pruneIntervalMs = 60_000;
const pruneBatch = 5_000;
const natsConsumer = 'nats';
const roles: readonly RelayRole[] = ['batches', 'nats'];
const idle = { count: 0, oldestAgeSeconds: 0 };

/** A consumer's place: the last batch it finished, and the last position it handled in the next. */
interface Cursor {
  batchId: string;
  position: string | null;
}

/** What one pass did: events handled, and whether more is waiting at once. */
interface Pass {
  events: number;
  more: boolean;
}

/**
 * The events relay of docs/interfaces.md §14 and docs/events-order.md, one object per replica and one
 * holder per role and deployment (a lease row each, so it works through PgBouncer in transaction mode;
 * another replica takes a role over once its holder's lease ran out):
 * - `batches` (any replica): takes a snapshot batch every poll, which records the batch and makes its
 *   webhook deliveries in one statement; the webhooks never wait for a broker;
 * - `nats` (only a replica with EVENTS_NATS_URL): publishes the recorded batches in order, each agent's
 *   events one after the other, and moves its cursor (event_consumers) once the stream acknowledged
 *   them. A replica without a broker never takes it, so it never marks anything published.
 * Before the first batch it drains the rows event_outbox still holds from before migration 024.
 * Shaped as a poll loop: `pass()` claims (the leases), works and says whether more is due; `start`,
 * `stop` and the pause between passes (with backoff after errors) are the loop's.
 * Not an instance of src/workers/poll-loop.ts: PollLoop claims independent items (rows under their
 * own lease, SKIP LOCKED) and works them side by side, any replica any item. The relay's work is one
 * ordered stream per role: a batch can only follow the previous one, a NATS page only the page
 * before it (an agent's order), so there is never more than one item, its lease is the role's row,
 * and a pass must chain into the next at once while a backlog lasts (PollLoop waits for the poll).
 */
export class EventRelay {
  private readonly token = randomUUID();
  private readonly holds: Record<RelayRole, boolean> = { batches: false, nats: false };
  /** The latest batch this replica knows: the base of its next batch (undefined: read it again). */
  private base: Batch | undefined;
  /**
   * The batch this replica just took and its first events by position (all of them, `whole`, unless
   * it holds more than a page): the NATS step publishes them as its first page without reading them again.
   */
  private taken: { previousId: string; batch: Batch; events: readonly BatchEvent[]; whole: boolean } | undefined;
  /** The NATS consumer's cursor as last saved (undefined: read it again). */
  private cursor: Cursor | undefined;
  /** The webhooks' cursor as last saved (undefined: read it again). */
  private hooks: Cursor | undefined;
  private outboxDrained = false;
  private readonly due = {
    leases: Number.NEGATIVE_INFINITY,
    nats: Number.NEGATIVE_INFINITY,
    stats: Number.NEGATIVE_INFINITY,
    prune: Number.NEGATIVE_INFINITY,
  };
  private lastWarning = Number.NEGATIVE_INFINITY;
  private errors = 0;
  private stopped = true;
  private running: Promise<void> | undefined;
  /** The backlog counts under way, beside the passes. */
  private statsRunning: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private wake: (() => void) | undefined;

  constructor(
    private readonly deps: {
      batches: EventBatchStore;
      outbox: EventOutbox;
      publisher: EventPublisher | undefined;
      settings: RelaySettings;
      metrics: Metrics;
      log: Logger;
      /** This replica's name in the lease rows. */
      holder: string;
    },
  ) {}

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.running = this.loop();
  }

  /** Stops after the pass under way and gives the leases back, so another replica takes over at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.wake?.();
    await this.running;
    await this.statsRunning;
    for (const role of roles) {
      if (!this.holds[role]) continue;
      this.holds[role] = false;
      this.deps.metrics.eventsRelayHolder.set({ role }, 0);
      await this.deps.batches.release(role, this.token).catch(() => undefined);
    }
  }

  /** One pass at once, without waiting for the next poll (tests); how many events it handled. */
  async relayNow(): Promise<number> {
    return (await this.pass()).events;
  }

  /** Claim (the leases), work (the outbox's rows, a batch, a page to NATS), housekeeping. */
  async pass(): Promise<Pass> {
    await this.claimLeases();
    let events = 0;
    let more = false;
    if (!this.outboxDrained && (this.holds.nats || (this.holds.batches && !this.deps.publisher))) {
      const drained = await this.drainOutbox();
      events += drained;
      more ||= drained > 0;
    }
    // The two consumers side by side (each its own statements on its own connection): the NATS
    // step never waits for a page of webhook deliveries, nor the batches for a broker's acknowledgements.
    // Both settle before the pass ends (a failure of one never leaves the other running into the next pass).
    let batching = true;
    const taking = this.holds.batches ? this.takeBatch() : Promise.resolve(0);
    const batchesStep = this.batchesStep(taking).finally(() => {
      batching = false;
    });
    const [batched, published] = settledBoth(await Promise.allSettled([batchesStep, this.natsSteps(taking, () => batching)]));
    await this.housekeeping();
    return { events: events + batched.events + published.events, more: more || batched.more || published.more };
  }

  /** The `batches` role's share of a pass: a batch (`taking`), then a page of webhook deliveries still owed. */
  private async batchesStep(taking: Promise<number>): Promise<Pass> {
    const taken = await taking;
    if (!this.holds.batches) return { events: 0, more: false };
    const fanned = await this.fanOutStep();
    return { events: taken, more: taken >= this.deps.settings.batchSize || fanned.more };
  }

  /**
   * NATS pages one after the other while the batches' statements are still under way (and more is
   * there); then, once the batch of this pass is taken (`taking`), that batch too when the cursor is
   * at it: published in the pass that took it, never a poll later (a pass that ended first left
   * every event a whole pass and a pause behind its batch: p50 87 ms beside the bench's enable load).
   */
  private async natsSteps(taking: Promise<number>, batching: () => boolean): Promise<Pass> {
    let events = 0;
    let waited = false;
    for (;;) {
      const step = await this.natsStep();
      events += step.events;
      if (step.more && batching()) continue;
      if (!waited) {
        waited = true;
        // A failed take fails the pass through the batches' step; here it only ends the waiting.
        if ((await taking.catch(() => 0)) > 0 && this.taken) continue;
      }
      return { events, more: step.more };
    }
  }

  /** The `nats` role's share of a pass: a page published (after the outbox's rows, and not during a retry's pause). */
  private async natsStep(): Promise<Pass> {
    if (!this.holds.nats || !this.outboxDrained || performance.now() < this.due.nats) return { events: 0, more: false };
    return this.publishStep();
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      try {
        const pass = await this.pass();
        this.errors = 0;
        if (pass.more) continue;
        const { pollIntervalMs } = this.deps.settings;
        await this.sleep(pass.events > 0 ? Math.min(pollIntervalMs, busyPauseMs) : pollIntervalMs);
      } catch (error) {
        this.errors += 1;
        // What this replica knew may be stale (another replica took a batch): read it again.
        this.base = undefined;
        this.taken = undefined;
        this.cursor = undefined;
        this.hooks = undefined;
        this.warn(
          { reason: (error as Error).message, ...sqlstateFields(error) },
          'the event relay could not reach the database; trying again',
        );
        await this.sleep(Math.min(this.deps.settings.pollIntervalMs * 2 ** this.errors, 5_000));
      }
    }
  }

  /** Takes a role whose lease is free (every quarter lease), and renews `nats` (every third). */
  private async claimLeases(): Promise<void> {
    const now = performance.now();
    const { leaseMs } = this.deps.settings;
    if (now < this.due.leases) return;
    this.due.leases = now + Math.max(this.deps.settings.pollIntervalMs, Math.min(leaseMs / 4, 1_000));
    for (const role of roles) {
      if (role === 'nats' && !this.deps.publisher) continue;
      // `batches` is renewed by every batch statement; taken here only when not held.
      if (role === 'batches' && this.holds.batches) continue;
      this.setHeld(role, await this.deps.batches.acquire(role, this.deps.holder, this.token, leaseMs));
    }
  }

  private setHeld(role: RelayRole, held: boolean): void {
    if (held !== this.holds[role]) {
      this.deps.log.info({ role, held }, held ? 'this replica now relays events' : 'this replica no longer relays events');
      if (!held && role === 'batches') for (const stage of ['batches', 'outbox', 'nats']) this.report(stage, idle);
      if (!held) {
        this.base = undefined;
        this.taken = undefined;
        this.cursor = undefined;
        this.hooks = undefined;
      }
    }
    this.holds[role] = held;
    this.deps.metrics.eventsRelayHolder.set({ role }, held ? 1 : 0);
  }

  /** The outbox rows written before migration 024: published (with a broker) and marked, as before. */
  private async drainOutbox(): Promise<number> {
    const { outbox, publisher, settings, batches } = this.deps;
    // Without a broker here, only in a deployment that has none: a replica with one publishes them.
    if (!publisher && (await batches.brokerSeen())) {
      this.outboxDrained = true;
      return 0;
    }
    const events = await outbox.claim(settings.batchSize, settings.leaseMs);
    if (events.length === 0) {
      this.outboxDrained = true;
      return 0;
    }
    const outcomes = await Promise.all(events.map((event) => this.publish(event, event.ageSeconds, performance.now())));
    const relayed = events.filter((_, at) => outcomes[at]).map((event) => event.id);
    const failed = events.filter((_, at) => !outcomes[at]).map((event) => event.id);
    if (relayed.length > 0) await outbox.markRelayed(relayed);
    if (failed.length > 0) await outbox.release(failed, settings.retryDelayMs);
    return relayed.length;
  }

  /** One batch: every event committed since the last; how many. */
  private async takeBatch(): Promise<number> {
    const { batches, settings, metrics } = this.deps;
    this.base ??= await batches.latest();
    const base = this.base;
    const readAt = performance.now();
    const result = await batches.take(base, { token: this.token, leaseMs: settings.leaseMs }, settings.source, settings.batchSize);
    if (!result.held) {
      this.setHeld('batches', false);
      return 0;
    }
    if (!result.batch) return 0;
    this.base = result.batch;
    this.hooks = result.fannedOut ? { batchId: result.batch.id, position: null } : undefined;
    const whole = result.events.length === result.batch.events;
    this.taken = { previousId: base.id, batch: result.batch, events: result.events, whole };
    metrics.eventsBatched.inc(result.batch.events);
    if (!this.deps.publisher) {
      for (const event of result.events)
        metrics.eventsRelayLag.observe({ stage: 'batches' }, event.ageSeconds + (performance.now() - readAt) / 1_000);
    }
    return result.batch.events;
  }

  /** The webhook deliveries of the next page of a batch the batch statement could not fan out whole. */
  private async fanOutStep(): Promise<Pass> {
    const { batches, settings } = this.deps;
    this.hooks ??= await batches.cursor('webhooks');
    const hooks = this.hooks;
    if (hooks.position === null && hooks.batchId === this.base?.id) return { events: 0, more: false };
    const pair = await batches.batchAfter(hooks.batchId);
    if (!pair) return { events: 0, more: false };
    const position = pair.previous.id === hooks.batchId ? hooks.position : null;
    const lease = { token: this.token, leaseMs: settings.leaseMs };
    const result = await batches.fanOut(pair.previous, pair.batch, position, settings.batchSize, settings.source, lease);
    this.hooks = result.held ? result.cursor : undefined;
    return { events: result.events, more: result.held };
  }

  /** Publishes the next page of the recorded batches to NATS, then moves the cursor. */
  private async publishStep(): Promise<Pass> {
    const { batches, settings } = this.deps;
    this.cursor ??= await batches.cursor(natsConsumer);
    const cursor = this.cursor;
    const page = await this.nextPage(cursor);
    if (!page) return { events: 0, more: false };
    const readAt = performance.now();
    const byAgent = new Map<string, BatchEvent[]>();
    for (const event of page.events) byAgent.set(event.agentId, [...(byAgent.get(event.agentId) ?? []), event]);
    const outcomes = await Promise.all([...byAgent.values()].map((own) => this.publishInOrder(own, readAt)));
    if (outcomes.some((ok) => !ok)) {
      // Nothing moves: the page goes out again (the stream drops what it has, by id) after a pause.
      this.due.nats = performance.now() + settings.retryDelayMs;
      return { events: 0, more: false };
    }
    const next = page.finished
      ? { batchId: page.batch.id, position: null }
      : { batchId: cursor.batchId, position: page.events.at(-1)!.position };
    const { held, moved } = await batches.advance(natsConsumer, { token: this.token, leaseMs: settings.leaseMs }, cursor, next);
    if (!held) {
      this.setHeld('nats', false);
      return { events: 0, more: false };
    }
    if (!moved) {
      // Someone moved the cursor (an operator skipping a backlog, the bench starting at its load):
      // what this replica remembered is not written over; it goes on from where the row says.
      this.deps.log.info({ from: cursor }, "the NATS consumer's cursor was moved from outside the relay; it resumes there");
      this.cursor = undefined;
      this.taken = undefined;
      return { events: 0, more: true };
    }
    this.cursor = next;
    // Caught up with the batch this replica just took: nothing more until the next one.
    return { events: page.events.length, more: !(page.finished && this.base?.id === next.batchId) };
  }

  /** The events after the cursor: from the batch just taken when it is the next, else read. */
  private async nextPage(cursor: Cursor) {
    const { batches, settings } = this.deps;
    const taken = this.taken;
    if (taken && taken.previousId === cursor.batchId && cursor.position === null) {
      this.taken = undefined;
      return { batch: taken.batch, events: taken.events, finished: taken.whole };
    }
    // Caught up with the latest batch this replica took (it holds `batches`): nothing to read until
    // it takes the next, which it hands over above. Each pass asked the database for a batch after
    // it while its own take was still under way.
    if (this.holds.batches && this.base?.id === cursor.batchId && cursor.position === null) return undefined;
    const pair = await batches.batchAfter(cursor.batchId);
    if (!pair) return undefined;
    if (pair.previous.id !== cursor.batchId) {
      this.deps.log.error(
        { from: cursor.batchId, to: pair.previous.id },
        'batches the NATS consumer had not published were pruned; it resumes at the oldest kept',
      );
      this.cursor = { batchId: pair.previous.id, position: null };
    }
    const position = pair.previous.id === cursor.batchId ? cursor.position : null;
    const events = await batches.read(pair.previous, pair.batch, position, settings.batchSize, settings.source);
    return { batch: pair.batch, events, finished: events.length < settings.batchSize };
  }

  /** An agent's events one after the other, each acknowledged before the next goes; false at the first failure. */
  private async publishInOrder(events: readonly BatchEvent[], readAt: number): Promise<boolean> {
    for (const event of events) if (!(await this.publish(event, event.ageSeconds, readAt))) return false;
    return true;
  }

  /** Publishes one event (without a broker: nothing to do); whether it was acknowledged. */
  private async publish(event: PublishableEvent, ageSeconds: number, readAt: number): Promise<boolean> {
    const { publisher, metrics } = this.deps;
    if (!isCloudEvent(parsed(event.event))) {
      metrics.eventsPublishFailures.inc({ reason: 'invalid' });
      this.warn({ eventId: event.id, type: event.type }, 'an event does not match the event schema; it is not published');
      return false;
    }
    if (!publisher) return true;
    const startedAt = performance.now();
    try {
      const ack = await publisher.publish(event);
      const now = performance.now();
      metrics.eventsPublishDuration.observe((now - startedAt) / 1_000);
      metrics.eventsPublished.inc({ duplicate: String(ack.duplicate) });
      metrics.eventsRelayLag.observe({ stage: 'nats' }, ageSeconds + (now - readAt) / 1_000);
      return true;
    } catch (error) {
      const reason = error instanceof PublishError ? error.reason : 'rejected';
      metrics.eventsPublishFailures.inc({ reason });
      this.warn({ reason, cause: (error as Error).message }, 'could not publish events; they wait in their batches');
      return false;
    }
  }

  private async housekeeping(): Promise<void> {
    const now = performance.now();
    const { batches, outbox, settings } = this.deps;
    // The holder of `batches` reports every stage (a dead NATS consumer then shows as a growing
    // age, whichever replica would take it); a replica that loses the role zeroes its figures.
    // The counts run beside the passes, never in one: each reads every event not yet consumed (a
    // backlog's worth), and a pass that waited for them held every batch back by as long (a bench
    // saw 170-350 ms every 5 s).
    if (this.holds.batches && now >= this.due.stats && !this.statsRunning) {
      this.due.stats = now + statsIntervalMs;
      this.statsRunning = (async () => {
        this.report('batches', await batches.unbatched());
        this.report('outbox', this.outboxDrained ? idle : await outbox.backlog());
        this.report('nats', (await batches.brokerSeen()) ? await batches.unconsumed(natsConsumer) : idle);
      })()
        .catch((error: unknown) => this.warn({ reason: (error as Error).message }, 'could not count the events backlog'))
        .finally(() => {
          this.statsRunning = undefined;
        });
    }
    if (this.holds.batches && now >= this.due.prune) {
      this.due.prune = now + pruneIntervalMs;
      // Until less than a full statement's worth is left: pruned faster than any write rate.
      while (!this.stopped && (await batches.prune(settings.retentionMs, pruneBatch)) >= pruneBatch);
      while (!this.stopped && (await outbox.prune(settings.retentionMs, pruneBatch)) >= pruneBatch);
    }
  }

  private report(stage: string, figures: { count: number; oldestAgeSeconds: number }): void {
    this.deps.metrics.eventsBacklog.set({ stage }, figures.count);
    this.deps.metrics.eventsOldestAge.set({ stage }, figures.oldestAgeSeconds);
  }

  /** One log line per 10 s at most while something keeps failing. */
  private warn(fields: object, message: string): void {
    if (performance.now() - this.lastWarning < 10_000) return;
    this.lastWarning = performance.now();
    this.deps.log.warn(fields, message);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      this.wake = resolve;
      this.timer = setTimeout(resolve, ms);
    }).finally(() => {
      this.wake = undefined;
    });
  }
}

/** The two outcomes, or the first failure. */
function settledBoth(outcomes: PromiseSettledResult<Pass>[]): [Pass, Pass] {
  for (const outcome of outcomes) if (outcome.status === 'rejected') throw outcome.reason;
  return outcomes.map((outcome) => (outcome as PromiseFulfilledResult<Pass>).value) as [Pass, Pass];
}

function parsed(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
