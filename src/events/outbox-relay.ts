import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { sqlstateFields } from '../observability/dependency-calls.js';
import type { Metrics } from '../observability/metrics.js';
import type { EventOutbox, OutboxEvent } from '../stores/event-outbox.js';
import { isCloudEvent } from './cloud-event.js';
import { type EventPublisher, PublishError } from './nats-publisher.js';

/** EVENTS_RELAY_* and EVENTS_RETENTION_MS (docs/configuration.md). */
export interface RelaySettings {
  pollIntervalMs: number;
  batchSize: number;
  /** How long a claim is this replica's: a replica that dies leaves its events to another after it. */
  leaseMs: number;
  /** After a publish that failed, the event is due again after this. */
  retryDelayMs: number;
  /** Relayed events stay this long in the outbox before they are deleted. */
  retentionMs: number;
}

const statsIntervalMs = 5_000;
/** The pause after a batch that was not full. */
const busyPauseMs = 10;
const pruneIntervalMs = 60_000;
const pruneBatch = 500;
const pruneBatchesPerRound = 20;

/**
 * The outbox relay of docs/interfaces.md §14, one per replica, always running: with a publisher
 * (EVENTS_NATS_URL) it publishes each claimed event to JetStream and marks it relayed only after the
 * stream's acknowledgement; without one it only marks (the outbox still feeds the partner webhooks).
 * A claim holds at most one event per agent (its oldest unrelayed one), so an agent's events go out
 * one after the other, each acknowledged before the next is claimed; different agents' events go
 * out side by side. A replica killed between the acknowledgement and the mark leaves its claim to
 * run out: another replica publishes the event again under the same id, which the stream drops as a
 * duplicate. A broker that is down or slow only makes events wait: no status change waits for it.
 */
export function createOutboxRelay(deps: {
  outbox: EventOutbox;
  publisher: EventPublisher | undefined;
  settings: RelaySettings;
  metrics: Metrics;
  log: Logger;
}) {
  const { outbox, publisher, settings, metrics, log } = deps;
  let stopped = true;
  let timer: NodeJS.Timeout | undefined;
  let wake: (() => void) | undefined;
  let running: Promise<void> | undefined;
  let lastStats = Number.NEGATIVE_INFINITY;
  let lastPrune = Number.NEGATIVE_INFINITY;
  let lastFailureLine = Number.NEGATIVE_INFINITY;

  async function send(event: OutboxEvent, claimedAt: number): Promise<boolean> {
    if (!isCloudEvent(parsed(event.event))) {
      metrics.eventsPublishFailures.inc({ reason: 'invalid' });
      warnOnce({ eventId: event.id, type: event.type }, 'an outbox event does not match the event schema; it is not published');
      return false;
    }
    if (!publisher) {
      metrics.eventsRelayLag.observe(event.ageSeconds + (performance.now() - claimedAt) / 1_000);
      return true;
    }
    const startedAt = performance.now();
    try {
      const ack = await publisher.publish(event);
      const now = performance.now();
      metrics.eventsPublishDuration.observe((now - startedAt) / 1_000);
      metrics.eventsPublished.inc({ duplicate: String(ack.duplicate) });
      metrics.eventsRelayLag.observe(event.ageSeconds + (now - claimedAt) / 1_000);
      return true;
    } catch (error) {
      const reason = error instanceof PublishError ? error.reason : 'rejected';
      metrics.eventsPublishFailures.inc({ reason });
      warnOnce({ reason, cause: (error as Error).message }, 'could not publish events; they wait in the outbox');
      return false;
    }
  }

  function parsed(text: string): unknown {
    try {
      return JSON.parse(text);
    } catch {
      return undefined;
    }
  }

  /** One log line per 10 s at most while publishing keeps failing. */
  function warnOnce(fields: object, message: string): void {
    if (performance.now() - lastFailureLine < 10_000) return;
    lastFailureLine = performance.now();
    log.warn(fields, message);
  }

  /** Claims, publishes and marks one batch; how many events it relayed. */
  async function relayBatch(): Promise<number> {
    const claimedAt = performance.now();
    const events = await outbox.claim(settings.batchSize, settings.leaseMs);
    if (events.length === 0) return 0;
    const outcomes = await Promise.all(events.map((event) => send(event, claimedAt)));
    const relayed = events.filter((_, at) => outcomes[at]).map((event) => event.id);
    const failed = events.filter((_, at) => !outcomes[at]).map((event) => event.id);
    if (relayed.length > 0) await outbox.markRelayed(relayed);
    if (failed.length > 0) await outbox.release(failed, settings.retryDelayMs);
    return relayed.length;
  }

  async function housekeeping(): Promise<void> {
    const now = performance.now();
    if (now - lastStats >= statsIntervalMs) {
      lastStats = now;
      const backlog = await outbox.backlog();
      metrics.eventsOutboxBacklog.set(backlog.count);
      metrics.eventsOutboxOldestAge.set(backlog.oldestAgeSeconds);
    }
    if (now - lastPrune >= pruneIntervalMs) {
      lastPrune = now;
      for (let batch = 0; batch < pruneBatchesPerRound && !stopped; batch += 1) {
        if ((await outbox.prune(settings.retentionMs, pruneBatch)) < pruneBatch) break;
      }
    }
  }

  const sleep = (ms: number) =>
    new Promise<void>((resolve) => {
      wake = resolve;
      timer = setTimeout(resolve, ms);
    }).finally(() => {
      wake = undefined;
    });

  async function loop(): Promise<void> {
    let errors = 0;
    while (!stopped) {
      try {
        await housekeeping();
        const relayed = await relayBatch();
        errors = 0;
        // A full batch: more are waiting, claim again at once. A partial one: events are coming in
        // one by one; a short pause lets the next claim take several, so that a steady stream of
        // changes costs two statements a batch rather than two an event.
        if (relayed >= settings.batchSize) continue;
        await sleep(relayed > 0 ? Math.min(settings.pollIntervalMs, busyPauseMs) : settings.pollIntervalMs);
      } catch (error) {
        errors += 1;
        warnOnce(
          { reason: (error as Error).message, ...sqlstateFields(error) },
          'the event relay could not reach the outbox; trying again',
        );
        await sleep(Math.min(settings.pollIntervalMs * 2 ** errors, 5_000));
      }
    }
  }

  return {
    start(): void {
      if (!stopped) return;
      stopped = false;
      running = loop();
    },
    /** Stops after the batch under way (its events marked, or left to their lease). */
    async stop(): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      wake?.();
      await running;
    },
    /** Relays what is due now, without waiting for the next poll (tests). */
    relayNow: relayBatch,
  };
}
