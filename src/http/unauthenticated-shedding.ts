import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { problem, problemDetails, sendProblem } from './problems.js';

/** How long a shed unauthenticated request is held before its 503, and how many are held at once. */
const holdMs = 1_000;
const maxHeld = 1_024;
/** Requests without a valid key per second from which they count as a flood. */
const floodPerSecond = 100;
/** How long unauthenticated requests are shed after a flood of them last made the process busy. */
const sheddingSeconds = 10;
/**
 * Bytes of API documents a replica sends a second at most (about 15 whole OpenAPI documents, or
 * 100 gzipped): a crawler asking for the 277 KB document 200 times a second would otherwise have a
 * replica write 55 MB/s, which on a busy machine tripled a partner's p99 without ever making the
 * event loop look busy. Past it a document request is shed as a flood's is; a 304 costs nothing.
 */
const documentBytesPerSecond = 4 * 1024 * 1024;

/** under-pressure's figures of the last sample. */
export type PressureFigures = () => { eventLoopDelay: number; eventLoopUtilized: number };

/**
 * The shedding of requests that carry no valid key (docs/interfaces.md §10), shared by every route
 * such a request reaches: the partner routes' 401s, the OpenAPI document and the reference page.
 * Every such request counts towards the flood; for 10 s after a flood of them (100 a second or
 * more) found the process busy (event-loop utilisation over the last second at least
 * `utilizationPercent`, or a quarter of the delay at which everything is shed), they get a 503 with
 * Retry-After and `Connection: close`, held for a second first (at most 1,024 at once): a client
 * flooding them on kept-alive connections then sends about one request a second per connection,
 * and the partners' requests keep the process.
 */
export class UnauthenticatedShedding {
  /** under-pressure's figures, once the partner scope has registered it. */
  pressure: PressureFigures | undefined;
  private held = 0;
  private second = 0;
  private thisSecond = 0;
  private lastSecond = 0;
  private sheddingUntil = 0;
  private documents = { second: 0, bytes: 0 };
  private readonly utilization: number;
  private readonly maxDelayMs: number;

  constructor(settings: { utilizationPercent: number; overloadMaxEventLoopDelayMs: number }) {
    this.utilization = settings.utilizationPercent / 100;
    this.maxDelayMs = settings.overloadMaxEventLoopDelayMs / 4;
  }

  /** Counts one request without a valid key; whether it is shed now. */
  sheds(): boolean {
    if (this.utilization >= 1) return false;
    const now = Math.floor(performance.now() / 1_000);
    if (now !== this.second) {
      this.lastSecond = now === this.second + 1 ? this.thisSecond : 0;
      this.thisSecond = 0;
      this.second = now;
    }
    this.thisSecond += 1;
    if (Math.max(this.thisSecond, this.lastSecond) >= floodPerSecond) {
      const figures = this.pressure?.();
      const busy = figures !== undefined && (figures.eventLoopUtilized >= this.utilization || figures.eventLoopDelay > this.maxDelayMs);
      if (busy) this.sheddingUntil = now + sheddingSeconds;
    }
    return now < this.sheddingUntil;
  }

  /**
   * Counts `bytes` of an API document about to be sent; whether they are past this second's budget
   * (then nothing is counted and the request is shed). The first document of a second always goes.
   */
  overDocumentBudget(bytes: number): boolean {
    const now = Math.floor(performance.now() / 1_000);
    if (now !== this.documents.second) this.documents = { second: now, bytes: 0 };
    if (this.documents.bytes > 0 && this.documents.bytes + bytes > documentBytesPerSecond) return true;
    this.documents.bytes += bytes;
    return false;
  }

  /** Answers a shed request: held a moment, then 503 with Retry-After and Connection: close. */
  async shed(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    request.audit.outcome = 'unauthenticated_shed';
    if (this.held < maxHeld) {
      this.held += 1;
      await sleep(holdMs);
      this.held -= 1;
    }
    reply.header('retry-after', '1').header('connection', 'close');
    return sendProblem(reply, problem('unavailable', problemDetails.unavailable, request.id));
  }

  /** An onRequest hook for routes served without a key (the API documents). */
  readonly hook = async (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> => {
    if (this.sheds()) return this.shed(request, reply);
    return undefined;
  };
}
