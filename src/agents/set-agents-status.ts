// The bulk use case: up to 1,000 status changes of one network in one call, each made as the single change is.

import type { ChangeAuthor } from '../stores/agent-repository.js';
import { forNetwork } from '../stores/pool-wait.js';
import type { BatchChange } from '../stores/status-batches.js';
import type { BulkRecorder } from './bulk-recorder.js';
import type { SharedMarks } from './mark-queue.js';
import type { AcceptedDisable, AgentStatus, AgentStatusUseCase } from './set-agent-status.js';
import type { SharedCalls } from './shared-calls.js';

/** What one change came to: the single use case's value, or what it threw (answered by src/http/answers.ts). */
export type BulkItemResult = { value: AgentStatus | AcceptedDisable } | { error: unknown };

export interface BulkStatusDeps {
  /** The single change's use case, with the network's allowance of disables. */
  agentStatus: Pick<AgentStatusUseCase, 'setAgentStatus'> & {
    /** Places for every disable at once, or TooManyDisables. */
    reserveAll(networkId: string, agentIds: readonly string[]): Array<() => void>;
  };
  /** A new set of shared spend-management calls for one batch of the network (the protocol's). */
  newSharedCalls: (networkId: string) => SharedCalls;
  /** New shared marks for one batch of the network (the runner's mark slots). */
  newSharedMarks: (networkId: string) => SharedMarks;
  /**
   * A new recorder for one batch: its recording statements (the disables' and the enables'), many
   * agents a statement, BULK_STATEMENTS_IN_FLIGHT of them at once, since the request pool is every
   * network's and a batch of 1,000 must not queue its statements ahead of another network's single change.
   */
  newRecorder: (networkId: string, author: ChangeAuthor) => BulkRecorder;
}

export interface BulkStatusCommand {
  networkId: string;
  partnerName: string;
  /** The batch's x-request-id: every change row of the batch carries it. */
  requestId: string;
  /** Monotonic ms by which every change is answered (the batch's deadline). */
  deadline: number;
  changes: readonly BatchChange[];
}

export interface BulkProgress {
  /** Called once every change is recorded (its change row committed) or answered without one. */
  allRecorded?: () => void;
  /** Called as each change is answered, with its index. */
  answered?: (index: number, result: BulkItemResult) => void;
}

/**
 * Bulk status changes (docs/interfaces.md §16). Every change is the single change
 * (setAgentStatus): its own change row carrying the batch's request id, events, pending disable,
 * counts and completion; changes are independent, and one that fails neither undoes nor holds back
 * another. What a batch shares: the network's allowance of disables at once, taken for all its
 * disables or none (a whole 429 that changes nothing); its spend-management calls (up to 100
 * campaigns of any of its agents a call, src/agents/shared-calls.ts) with their Redis round trips;
 * and its turn at the request pool (`statementsInFlight`).
 */
export function createBulkStatusUseCase(deps: BulkStatusDeps) {
  /**
   * Takes the network's allowance for every disable of the batch (or answers TooManyDisables as an
   * error, having taken nothing); `start` then makes the changes, `cancel` gives the allowance back.
   */
  function prepare(command: BulkStatusCommand): PreparedBatch | { error: unknown } {
    const { networkId, changes } = command;
    const disables = changes.filter((change) => !change.enabled).map((change) => change.agentId);
    let releases: Array<() => void>;
    try {
      releases = deps.agentStatus.reserveAll(networkId, disables);
    } catch (error) {
      return { error };
    }
    const releaseOf = new Map(disables.map((agentId, at) => [agentId, releases[at]!]));
    return {
      cancel: () => {
        for (const release of releases) release();
      },
      start: (progress = {}) => forNetwork(networkId, () => changeAll(command, releaseOf, progress)),
    };
  }

  function changeAll(command: BulkStatusCommand, releaseOf: Map<string, () => void>, progress: BulkProgress): Promise<BulkItemResult[]> {
    const { networkId, changes } = command;
    const shared = deps.newSharedCalls(networkId);
    const sharedMarks = deps.newSharedMarks(networkId);
    const recorder = deps.newRecorder(networkId, { partnerName: command.partnerName, requestId: command.requestId });
    let unrecorded = changes.length;
    const recordedOne = () => {
      unrecorded -= 1;
      if (unrecorded === 0) progress.allRecorded?.();
    };
    return Promise.all(
      changes.map(async (change, index): Promise<BulkItemResult> => {
        let recorded = false;
        const markRecorded = () => {
          if (recorded) return;
          recorded = true;
          recordedOne();
        };
        const member = change.enabled ? undefined : shared.join();
        let result: BulkItemResult;
        try {
          const value = await deps.agentStatus.setAgentStatus({
            networkId,
            agentId: change.agentId,
            enabled: change.enabled,
            partnerName: command.partnerName,
            requestId: command.requestId,
            deadline: command.deadline,
            bulk: {
              allowanceHeld: true,
              shared,
              sharedMarks,
              recorder,
              recorded: () => {
                member?.recorded();
                markRecorded();
              },
            },
          });
          result = { value };
        } catch (error) {
          result = { error };
        } finally {
          member?.leave();
          releaseOf.get(change.agentId)?.();
        }
        markRecorded();
        progress.answered?.(index, result);
        return result;
      }),
    );
  }

  return { prepare };
}

/** A batch whose allowance is taken: made by `start`, or given up by `cancel`. */
export interface PreparedBatch {
  start(progress?: BulkProgress): Promise<BulkItemResult[]>;
  cancel(): void;
}

export type BulkStatusUseCase = ReturnType<typeof createBulkStatusUseCase>;
