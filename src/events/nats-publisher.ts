import { type JetStreamClient, jetstream, jetstreamManager, StorageType } from '@nats-io/jetstream';
import { connect, type NatsConnection, nanos } from '@nats-io/transport-node';
import type { Logger } from 'pino';

/** EVENTS_* (docs/interfaces.md §14). */
export interface NatsSettings {
  url: string;
  stream: string;
  subjectPrefix: string;
  /** EVENTS_CREATE_STREAM: create the stream when it is missing (otherwise the operator's). */
  createStream: boolean;
  publishTimeoutMs: number;
}

/** Why a publish was not acknowledged, for `events_publish_failures_total{reason}`. */
export type PublishFailure = 'not_connected' | 'timeout' | 'no_stream' | 'rejected' | 'invalid';

export class PublishError extends Error {
  override readonly name = 'PublishError';
  constructor(
    readonly reason: PublishFailure,
    detail: string,
  ) {
    super(`${reason}: ${detail}`);
  }
}

/** What a publish needs of an event: its id (`Nats-Msg-Id`), where it goes, and its JSON. */
export interface PublishableEvent {
  id: string;
  networkId: string;
  /** The type without the project's prefix (`agent.disabled`): the subject's last part. */
  type: string;
  /** The CloudEvent, JSON text, published as it is. */
  event: string;
}

export interface EventPublisher {
  /** Resolves on the stream's acknowledgement (`duplicate`: the stream had the id already); throws a PublishError otherwise. */
  publish(event: PublishableEvent): Promise<{ duplicate: boolean }>;
  close(): Promise<void>;
}

/** `<prefix>.<networkId>.<type>`, the type without the project's prefix (docs/interfaces.md §14). */
const subjectOf = (prefix: string, event: Pick<PublishableEvent, 'networkId' | 'type'>) => `${prefix}.${event.networkId}.${event.type}`;

/**
 * The JetStream side of the relay. It connects in the background and keeps reconnecting for ever,
 * so a broker that is down at start or later never stops the service: a publish meanwhile fails
 * fast (`not_connected`) and the event waits in its batch. Every publish carries the event id as
 * `Nats-Msg-Id`, so the stream drops a repeat (a relay killed between the acknowledgement and the
 * mark publishes again) within its duplicate window.
 */
export function createNatsPublisher(settings: NatsSettings, log: Logger): EventPublisher {
  const publisher = new NatsPublisher(settings, log);
  publisher.open();
  return publisher;
}

/** The connection and its JetStream client, reconnecting by itself; publishes fail fast while unlinked. */
class NatsPublisher implements EventPublisher {
  private connection: NatsConnection | undefined;
  private client: JetStreamClient | undefined;
  /** False between a disconnect and the reconnect: publishes fail at once rather than wait out their time-out. */
  private linked = false;
  private closed = false;
  private retry: NodeJS.Timeout | undefined;
  private connecting: Promise<void> | undefined;

  constructor(
    private readonly settings: NatsSettings,
    private readonly log: Logger,
  ) {}

  private async ensureStream(nc: NatsConnection): Promise<void> {
    const { settings, log } = this;
    if (!settings.createStream) return;
    const manager = await jetstreamManager(nc, { timeout: settings.publishTimeoutMs });
    try {
      await manager.streams.info(settings.stream);
    } catch {
      await manager.streams.add({
        name: settings.stream,
        subjects: [`${settings.subjectPrefix}.>`],
        storage: StorageType.File,
        duplicate_window: nanos(120_000),
      });
      log.info({ stream: settings.stream }, 'events stream created');
    }
  }

  open(): void {
    if (this.closed || this.connecting) return;
    this.connecting = this.connect().finally(() => {
      this.connecting = undefined;
    });
  }

  private async connect(): Promise<void> {
    const { settings, log } = this;
    try {
      const nc = await connect({
        servers: settings.url.split(','),
        name: 'partner-agent-status',
        maxReconnectAttempts: -1,
        reconnectTimeWait: 1_000,
        timeout: settings.publishTimeoutMs,
        // No error object (with its stack) made ahead of every publish for the case it fails: a
        // fifth of the relay's CPU per event (bench `--only=events` profile). A failure is
        // classified by its name and message, which stay the same.
        noAsyncTraces: true,
      });
      if (this.closed) {
        await nc.close();
        return;
      }
      await this.ensureStream(nc).catch((error: unknown) => {
        log.warn({ stream: settings.stream, reason: (error as Error).message }, 'could not create the events stream');
      });
      this.connection = nc;
      this.client = jetstream(nc, { timeout: settings.publishTimeoutMs });
      this.linked = true;
      log.info('connected to NATS for events');
      this.watch(nc);
    } catch (error) {
      log.warn({ reason: (error as Error).message }, 'could not connect to NATS for events; trying again');
      this.retry = setTimeout(() => this.open(), 1_000);
    }
  }

  /** Follows the connection's status: unlinked while it reconnects, opened again once closed. */
  private watch(nc: NatsConnection): void {
    void (async () => {
      for await (const status of nc.status()) {
        if (status.type === 'disconnect') {
          this.linked = false;
          this.log.warn('lost the NATS connection for events; reconnecting');
        } else if (status.type === 'reconnect') {
          this.linked = true;
          this.log.info('reconnected to NATS for events');
        }
      }
    })().catch(() => undefined);
    void nc.closed().then(() => {
      if (this.connection === nc) this.connection = undefined;
      if (!this.closed) this.open();
    });
  }

  async publish(event: PublishableEvent): Promise<{ duplicate: boolean }> {
    const nc = this.connection;
    const js = this.client;
    if (!nc || !js || !this.linked || nc.isClosed()) throw new PublishError('not_connected', 'no connection to NATS');
    try {
      const ack = await js.publish(subjectOf(this.settings.subjectPrefix, event), event.event, {
        msgID: event.id,
        timeout: this.settings.publishTimeoutMs,
      });
      return { duplicate: ack.duplicate };
    } catch (error) {
      throw classify(error);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retry);
    await this.connecting;
    const nc = this.connection;
    this.connection = undefined;
    if (nc) await nc.close().catch(() => undefined);
  }
}

function classify(error: unknown): PublishError {
  const name = (error as Error).name ?? '';
  const message = (error as Error).message ?? '';
  if (name === 'TimeoutError' || /timeout/i.test(message)) return new PublishError('timeout', message);
  if (name === 'NoRespondersError' || /no responders/i.test(message)) return new PublishError('no_stream', message);
  if (/closed|disconnect|connection/i.test(`${name} ${message}`)) return new PublishError('not_connected', message);
  return new PublishError('rejected', message.slice(0, 200));
}
