// One bulk change's shared spend-management calls: its agents' batches packed into calls of up to 100 campaigns.
import { randomUUID } from 'node:crypto';
import type { Clock } from '../clock.js';
import { DependencyError } from '../observability/dependency-calls.js';
import type { Lease } from '../stores/agent-repository.js';
import type { SharedPart } from '../stores/disable-queue.js';
import type { SentBatch } from '../stores/sent-pauses.js';
import type { ClaimCheck } from './claim-check.js';
import type { CallOwner } from './spend-scheduler.js';

/** The spend-management API takes 1 to 100 ids a call (docs/interfaces.md §6). */
const maxCallSize = 100;

/** What the shared calls of the replica use: the slots, the breakers' calls and the shared claim check. */
export interface SharedCallPorts {
  /** Runs `task` in a spend-management slot of the replica (SpendScheduler.run). */
  inSlot: <T>(owner: CallOwner, task: () => Promise<T>) => Promise<T>;
  /** The pause call, behind the spend-management breaker. */
  pauseSpending: (campaignIds: readonly string[], callKey: string) => Promise<{ confirmed: string[] }>;
  /** The campaign state, behind the Redis breaker: one round trip (a pipeline) for the whole call. */
  markPausedInStore: (campaignIds: readonly string[]) => Promise<{ confirmed: string[] }>;
  checkSharedClaims: (parts: readonly SharedPart[], sentKey: string) => Promise<Set<string>>;
  /** Whether the spend-management breaker is open: a call that would not be sent is not checked, so not recorded. */
  breakerOpen: () => boolean;
  clock: Clock;
  /** The oldest claim-check answer a call may start on (as for a run's own calls). */
  claimCheckMaxAgeMs: number;
  /**
   * The change's calls in slots at once, asked before each call (batchCallsInFlight): all the
   * replica's slots but a fifth while no other network has a change under way in the replica, a
   * fifth while one has. What slows another network's disable beside a batch is mostly the batch's
   * statements and marks keeping PostgreSQL and the machine busy, not the slots; the share paces
   * them. Alternated `npm run bench -- --only=bulk` runs on one machine (2026-11-29), another
   * network's disable beside a batch of 1,000 against its time alone: a half 1.88-2.44x; a third
   * 1.32-2.88x (7 of 11 runs over 1.5x); a fifth 1.00-1.93x (9 of 10 within 1.5x); an eighth
   * 1.02-1.36x. The batch against single calls: 4.7-5.3x with a third, 4.5-5.2x with a fifth (the
   * other network is under way for part of the batch only).
   */
  callsInFlight: () => number;
  /**
   * How long a part waits for others before a call smaller than 100 campaigns is sent, while other
   * agents of the change are still on their way (they are usually a few milliseconds behind).
   */
  lingerMs: number;
}

/**
 * How many calls a bulk change may have in slots at once, of the replica's `capacity`: a fifth (at
 * least 1) while another network has a change under way in the replica; otherwise all but that
 * fifth. The share is asked before each call, but calls already in flight keep their slots until
 * they answer: had the batch taken every slot, another network's first call would wait for one of
 * them (a spend-management round trip, more on a loaded machine). Timed per statement in
 * `--only=bulk` runs (2026-11-29), another network's disable waited 22 and 49 ms for a slot in 2
 * of its 5 samples of a run with every slot taken, and 0.1-0.3 ms in all 20 samples of four runs
 * with the fifth kept free. A replica of one slot has nothing to keep: its batch takes that slot,
 * and the other network waits.
 */
export function batchCallsInFlight(capacity: number, othersUnderWay: boolean): number {
  const fifth = Math.max(1, Math.floor(capacity / 5));
  return othersUnderWay ? fifth : Math.max(1, capacity - fifth);
}

/** One run's batch, offered to a shared call. */
export interface PartRequest {
  agentId: string;
  lease: Lease;
  /** The part: its campaigns, and its own record key (the run settles and forgets the part by it). */
  batch: SentBatch;
  claims: ClaimCheck;
  /** Asked inside the slot, before the check: whether the run may still start a call (not halted, not stopped). */
  mayJoin: () => boolean;
  /** The check recorded the part, or may have (it failed): the run forgets it if it was not sent after all. */
  recorded: () => void;
}

/** A part that was sent: what spend management confirmed of it, and Redis's answer for those (one pipeline for the call). */
export interface PartOutcome {
  confirmed: string[];
  stored: Promise<{ confirmed: string[] }>;
}

interface Waiting {
  part: PartRequest;
  resolve: (outcome: PartOutcome | undefined) => void;
  reject: (error: unknown) => void;
}

/**
 * The shared calls of one bulk change (docs/interfaces.md §16). Each agent's run stays its own (its
 * claim, flag, marks and completion); only its calls are pooled: parts wait here until 100
 * campaigns are waiting, or until every agent of the change still going on is waiting here (nothing
 * more can come), or for `lingerMs`. A call then takes one slot of the replica (in the network's
 * turn), checks every part's claim in one statement that records the parts still held and drops
 * the others before the call is recorded (a run superseded by an enable meanwhile sends nothing),
 * sends the held parts' campaigns under one key, and marks what it confirmed in Redis in one round
 * trip. A call is recorded whole and sent exactly as recorded.
 */
export class SharedCalls {
  private readonly waiting: Waiting[] = [];
  private waitingCampaigns = 0;
  /** Agents of the change whose changes are going on (joined, not left). */
  private live = 0;
  /** Agents of the change not recorded yet: each brings its first batch once it is. */
  private coming = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** The change's calls in their slots, and the calls formed while `callsInFlight` were. */
  private sending = 0;
  private readonly ready: Waiting[][] = [];

  constructor(
    private readonly ports: SharedCallPorts,
    private readonly owner: CallOwner,
  ) {}

  /**
   * An agent's change starts: `recorded` once its disable is recorded (its first batch follows at
   * once), `leave` once it has answered.
   */
  join(): { recorded: () => void; leave: () => void } {
    this.live += 1;
    this.coming += 1;
    let recorded = false;
    let left = false;
    const markRecorded = () => {
      if (recorded) return;
      recorded = true;
      this.coming -= 1;
      // Its first batch is on its way (a few promise steps behind): looked at once they are taken.
      setImmediate(() => this.form());
    };
    return {
      recorded: markRecorded,
      leave: () => {
        if (left) return;
        markRecorded();
        left = true;
        this.live -= 1;
        this.form();
      },
    };
  }

  /** Offers a run's batch to the next call; resolves when it was sent (undefined: it was not). */
  pause(part: PartRequest): Promise<PartOutcome | undefined> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ part, resolve, reject });
      this.waitingCampaigns += part.batch.campaignIds.length;
      this.form();
    });
  }

  /**
   * Sends what is ready: full calls at once; the rest once nothing more can come (no agent of the
   * change is still being recorded, or every one still going on is waiting here), or after
   * `lingerMs` without a new part (an agent held up elsewhere, say by a row another transaction holds).
   */
  private form(): void {
    while (this.waitingCampaigns >= maxCallSize) this.send(this.take());
    this.stopTimer();
    if (this.waiting.length === 0) return;
    const agentsWaiting = new Set(this.waiting.map((entry) => entry.part.agentId)).size;
    if (this.coming === 0 || agentsWaiting >= this.live) {
      this.send(this.take());
      this.form();
      return;
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (this.waiting.length > 0) this.send(this.take());
      this.form();
    }, this.ports.lingerMs);
  }

  private stopTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** The next call's parts: the oldest first, as many whole parts as fit in 100 campaigns. */
  private take(): Waiting[] {
    const call: Waiting[] = [];
    let size = 0;
    while (this.waiting.length > 0) {
      const next = this.waiting[0]!;
      const n = next.part.batch.campaignIds.length;
      if (call.length > 0 && size + n > maxCallSize) break;
      call.push(next);
      this.waiting.shift();
      size += n;
      this.waitingCampaigns -= n;
    }
    return call;
  }

  /**
   * Sends the call, or keeps it for when one of the change's calls in flight ends: a bulk change
   * holds at most `callsInFlight` of the replica's slots, so another network's call finds one free
   * at once instead of waiting for the change's calls, all started together, to end together.
   */
  private send(call: Waiting[]): void {
    if (call.length === 0) return;
    if (this.sending >= this.ports.callsInFlight()) {
      this.ready.push(call);
      return;
    }
    this.sending += 1;
    this.ports
      .inSlot(this.owner, () => this.inSlot(call))
      .catch((error: unknown) => {
        for (const entry of call) entry.reject(error);
      })
      .finally(() => {
        this.sending -= 1;
        // As many as the change may have in flight now: more than one once the others are done.
        const room = this.ports.callsInFlight() - this.sending;
        for (const next of this.ready.splice(0, Math.max(0, room))) this.send(next);
      });
  }

  /** Inside the slot: the parts still allowed, their claims checked and recorded in one statement, then the call. */
  private async inSlot(call: Waiting[]): Promise<void> {
    const { clock } = this.ports;
    const joining = call.filter((entry) => {
      if (entry.part.mayJoin()) return true;
      entry.resolve(undefined);
      return false;
    });
    if (joining.length === 0) return;
    if (this.ports.breakerOpen()) {
      const open = new DependencyError('spend_management', 'breaker_open', 'circuit open, call not attempted');
      for (const entry of joining) entry.reject(open);
      return;
    }
    const sentKey = randomUUID();
    const sentAt = clock.now();
    const parts = joining.map((entry) => ({
      agentId: entry.part.agentId,
      lease: entry.part.lease,
      renew: entry.part.claims.renewDue(sentAt),
      batch: entry.part.batch,
    }));
    let held: Set<string>;
    try {
      held = await this.ports.checkSharedClaims(parts, sentKey);
    } catch (error) {
      // The statement may have committed its records all the same: each run forgets its part.
      for (const entry of joining) {
        entry.part.claims.sharedAnswer({ failed: error });
        entry.part.recorded();
        entry.resolve(undefined);
      }
      return;
    }
    const sending: Waiting[] = [];
    for (const [at, entry] of joining.entries()) {
      const ours = held.has(entry.part.agentId);
      entry.part.claims.sharedAnswer({ ours, sentAt, renewed: parts[at]!.renew });
      if (!ours) {
        entry.resolve(undefined);
        continue;
      }
      entry.part.recorded();
      sending.push(entry);
    }
    if (sending.length === 0) return;
    // An answer older than the bound is not trusted (an enable may have answered since): the call,
    // recorded whole, is not sent, and each run forgets its part.
    if (clock.now() - sentAt > this.ports.claimCheckMaxAgeMs) {
      const late = new DependencyError('postgres', 'timeout', 'check_claim: answered too late to start a call');
      for (const entry of sending) {
        entry.part.claims.sharedAnswer({ failed: late });
        entry.resolve(undefined);
      }
      return;
    }
    await this.call(sending, sentKey);
  }

  private async call(sending: Waiting[], sentKey: string): Promise<void> {
    const ids = sending.flatMap((entry) => entry.part.batch.campaignIds);
    let confirmed: Set<string>;
    try {
      confirmed = new Set((await this.ports.pauseSpending(ids, sentKey)).confirmed);
    } catch (error) {
      for (const entry of sending) entry.reject(error);
      return;
    }
    const all = ids.filter((id) => confirmed.has(id));
    const stored = all.length > 0 ? this.ports.markPausedInStore(all) : Promise.resolve({ confirmed: [] });
    for (const entry of sending) {
      const own = entry.part.batch.campaignIds.filter((id) => confirmed.has(id));
      const ownSet = new Set(own);
      const part = stored.then((answer) => ({ confirmed: answer.confirmed.filter((id) => ownSet.has(id)) }));
      // Awaited by the run whenever it has something confirmed; never an unhandled rejection.
      part.catch(() => undefined);
      entry.resolve({ confirmed: own, stored: part });
    }
  }
}
