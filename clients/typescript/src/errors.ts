import type { components } from './generated/versions.js';

/** An RFC 9457 problem as the service sends it (application/problem+json). */
export type Problem = components['schemas']['Problem'];

/** What every error of this client has in common. */
export class PartnerClientError extends Error {
  override name = 'PartnerClientError';
}

/**
 * The service answered with an error (a problem+json body, or, from something in front of it, any
 * other body). `type` is the stable URN to match on; `requestId` is what to quote to support. On a
 * disable that did not finish (a 500 of API version 2026-11-21, or a superseded disable's 409),
 * `pausedCampaignCount` and `remainingCampaignCount` say how far it got: the service goes on by itself.
 */
export class PartnerApiError extends PartnerClientError {
  override name = 'PartnerApiError';
  readonly status: number;
  readonly type: string;
  readonly title: string;
  readonly detail: string | undefined;
  readonly requestId: string | undefined;
  readonly pausedCampaignCount: number | undefined;
  readonly remainingCampaignCount: number | undefined;
  /** On a 400 for an unsupported API version: the versions the service supports. */
  readonly supportedVersions: string[] | undefined;
  /** Seconds the service asked to wait (Retry-After), when it did. */
  readonly retryAfterSeconds: number | undefined;
  /** The problem object as received, or undefined when the body was not one. */
  readonly problem: Problem | undefined;

  constructor(
    status: number,
    problem: Problem | undefined,
    headers: { requestId: string | undefined; retryAfterSeconds: number | undefined },
  ) {
    const requestId = problem?.requestId ?? headers.requestId;
    const title = problem?.title ?? `HTTP ${status}`;
    super(`${status} ${title}${problem?.detail ? `: ${problem.detail}` : ''}${requestId ? ` (request id ${requestId})` : ''}`);
    this.status = status;
    this.type = problem?.type ?? 'about:blank';
    this.title = title;
    this.detail = problem?.detail;
    this.requestId = requestId;
    this.pausedCampaignCount = problem?.pausedCampaignCount;
    this.remainingCampaignCount = problem?.remainingCampaignCount;
    this.supportedVersions = problem?.supportedVersions;
    this.retryAfterSeconds = headers.retryAfterSeconds;
    this.problem = problem;
  }
}

/**
 * No answer came: the connection failed, was reset or timed out, on every attempt the client was
 * allowed to make. `cause` holds only the underlying error's name, code and message.
 */
export class PartnerNetworkError extends PartnerClientError {
  override name = 'PartnerNetworkError';
  readonly attempts: number;

  constructor(message: string, attempts: number, cause: { name: string; code: string | undefined; message: string }) {
    super(message, { cause });
    this.attempts = attempts;
  }
}

/**
 * An event on the live stream whose `data:` is not a JSON CloudEvent. The listener ends with it
 * rather than reconnecting: a reconnect would read the same event again, for ever. `eventId` is its
 * cursor: `listenToEvents({ after: eventId })` resumes after it (skipping it), `previousEventId`
 * before it (reading it again, once the cause is fixed).
 */
export class PartnerEventError extends PartnerClientError {
  override name = 'PartnerEventError';
  readonly eventId: string;
  readonly previousEventId: string | undefined;

  constructor(eventId: string, previousEventId: string | undefined, cause: unknown) {
    super(`the event ${eventId} on the stream is not JSON; resume with after: '${eventId}' to skip it`, {
      cause: { name: (cause as Error).name, message: (cause as Error).message },
    });
    this.eventId = eventId;
    this.previousEventId = previousEventId;
  }
}
