// The body of a bulk change, read by hand so that a 400 names the first bad change (docs/interfaces.md §16).
import type { BatchChange } from '../../stores/status-batches.js';
import { batchTexts, maxBatchChanges } from '../problems.js';
import { agentIdPattern } from './agent-status.schema.js';

const agentIdForm = new RegExp(agentIdPattern);

export interface BatchProblem {
  /** The index of the first bad change; undefined when the fault is the body's or the list's as a whole. */
  index: number | undefined;
  errors: Array<{ pointer: string; detail: string }>;
}

const whole = (pointer: string, detail: string): { problem: BatchProblem } => ({
  problem: { index: undefined, errors: [{ pointer, detail }] },
});
const at = (index: number, member: string, detail: string): { problem: BatchProblem } => ({
  problem: { index, errors: [{ pointer: `/changes/${index}${member}`, detail }] },
});

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** One change, or what is wrong with it (never quoting what was sent: a key pasted by mistake stays out of the answer). */
function readChange(value: unknown, index: number): BatchChange | { problem: BatchProblem } {
  if (!isObject(value)) return at(index, '', 'a change must be an object {"agentId", "enabled"}');
  for (const name of Object.keys(value)) {
    if (name !== 'agentId' && name !== 'enabled') return at(index, '', 'unknown property; only agentId and enabled are accepted');
  }
  const { agentId, enabled } = value;
  if (agentId === undefined) return at(index, '/agentId', 'agentId is required');
  if (typeof agentId !== 'string' || !agentIdForm.test(agentId)) {
    return at(index, '/agentId', 'agentId must have the form us-east-1:<uuid> (lowercase hexadecimal)');
  }
  if (enabled === undefined) return at(index, '/enabled', 'enabled is required');
  if (typeof enabled !== 'boolean') return at(index, '/enabled', 'enabled must be of type boolean');
  return { agentId, enabled };
}

/** The changes of a bulk change's body, in request order, or the problem that names its first fault. */
export function readBatchChanges(body: unknown): { changes: BatchChange[] } | { problem: BatchProblem } {
  if (!isObject(body)) return whole('', 'body must be a JSON object {"changes": [...]}');
  for (const name of Object.keys(body)) {
    if (name !== 'changes') return whole('', 'unknown property; only changes is accepted');
  }
  const list = body.changes;
  if (!Array.isArray(list)) return whole('/changes', 'changes is required and must be an array');
  if (list.length === 0) return whole('/changes', `changes must hold 1 to ${maxBatchChanges} changes`);
  const changes: BatchChange[] = [];
  const seen = new Set<string>();
  for (let index = 0; index < list.length; index += 1) {
    if (index >= maxBatchChanges) return at(index, '', `changes must hold 1 to ${maxBatchChanges} changes`);
    const change = readChange(list[index], index);
    if ('problem' in change) return change;
    if (seen.has(change.agentId)) return at(index, '/agentId', batchTexts.repeatedAgent);
    seen.add(change.agentId);
    changes.push(change);
  }
  return { changes };
}
