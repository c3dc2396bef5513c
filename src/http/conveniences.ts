// The partner conveniences of docs/interfaces.md §11 as HTTP sees them: reading `Prefer`,
// `Idempotency-Key` and `If-Match`, the ETag, and the idempotency key's claim around the status
// change (claimed before the handler runs, its answer kept or forgotten when the answer is sent).
import { randomUUID } from 'node:crypto';
import type { FastifyReply, FastifyRequest, onSendAsyncHookHandler, preHandlerAsyncHookHandler } from 'fastify';
import { apiVersionHeader, defaultApiVersion } from '../api-versions.js';
import { sqlstateFields } from '../observability/dependency-calls.js';
import type { Metrics } from '../observability/metrics.js';
import { type IdempotencyKeys, idempotencyKeyDigest, type KeyClaim } from '../stores/idempotency-keys.js';
import { statusChangeRouteLabel } from './paths.js';
import { convenienceTexts, problem, sendProblem } from './problems.js';

/**
 * The strong ETag naming an agent's latest change by its number among the agent's changes ("v0":
 * none yet), which moves with this agent's changes only. Opaque to partners. Tags of the table-wide
 * change id that earlier releases sent ("c…") name nothing any more: 412, never a false match.
 */
export function etagOf(latestChangeId: string): string {
  return `"v${latestChangeId}"`;
}

/**
 * If-Match (RFC 9110 §13.1.1): undefined when absent or `*` (then the change is unconditional: the
 * agent exists, or the answer is the 404 anyway); otherwise the change ids its strong tags name.
 * Weak tags never match (strong comparison), and a value that is not a list of entity tags names
 * nothing, so it answers 412 like a stale tag.
 */
export function ifMatchChangeIds(value: string | string[] | undefined): string[] | undefined {
  if (value === undefined) return undefined;
  const joined = Array.isArray(value) ? value.join(',') : value;
  if (joined.trim() === '*') return undefined;
  const ids: string[] = [];
  for (const match of joined.matchAll(/(W\/)?"([^"]*)"/g)) {
    const id = /^v(0|[1-9][0-9]{0,18})$/.exec(match[2]!)?.[1];
    if (!match[1] && id !== undefined) ids.push(id);
  }
  return ids;
}

/** Prefer values longer than this (all lines together) are read as no preference (docs/interfaces.md §11). */
export const maxPreferLength = 1_024;

/** RFC 9110 `tchar`: the characters of a token, by char code. */
const tchar = new Uint8Array(128);
for (const c of "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") tchar[c.charCodeAt(0)] = 1;
const isTchar = (code: number) => code < 128 && tchar[code] === 1;
const isOws = (code: number) => code === 0x20 || code === 0x09;

/**
 * Prefer (RFC 7240): whether `respond-async` is asked for, and `wait` in seconds when given as
 * delta-seconds. Names are case-insensitive, the first instance of a preference counts, parameters
 * and unknown preferences are ignored, and a malformed preference or `wait` is ignored (never an
 * error); so is a value over `maxPreferLength`.
 *
 * A scanner rather than regular expressions: each character is looked at a bounded number of
 * times, so the time is linear in the (capped) length whatever the value holds.
 */
export function readPrefer(value: string | string[] | undefined): { respondAsync: boolean; waitSeconds: number | undefined } {
  const joined = Array.isArray(value) ? value.join(',') : (value ?? '');
  const seen = joined.length > maxPreferLength ? new Map<string, string | undefined>() : preferences(joined);
  const wait = seen.get('wait');
  return {
    respondAsync: seen.has('respond-async'),
    waitSeconds: wait !== undefined && /^\d{1,9}$/.test(wait) ? Number(wait) : undefined,
  };
}

/**
 * The preferences of a Prefer value, name (lower-cased) to value, first instance only:
 * `#( token [ BWS "=" BWS word ] *( OWS ";" [ OWS parameter ] ) )`, `word` a token or a quoted
 * string. An element that does not have this shape is skipped up to the next comma outside a
 * quoted string.
 */
function preferences(text: string): Map<string, string | undefined> {
  const seen = new Map<string, string | undefined>();
  const end = text.length;
  const skipOws = (from: number) => {
    let i = from;
    while (i < end && isOws(text.charCodeAt(i))) i++;
    return i;
  };
  /** The index after the quoted string starting at `from` (at its `"`); -1 when it is not closed. */
  const pastQuoted = (from: number) => {
    for (let i = from + 1; i < end; i++) {
      const c = text.charCodeAt(i);
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) return i + 1;
    }
    return -1;
  };
  let at = 0;
  while (at < end) {
    let i = skipOws(at);
    const nameStart = i;
    while (i < end && isTchar(text.charCodeAt(i))) i++;
    const name = text.slice(nameStart, i).toLowerCase();
    let valid = name.length > 0;
    let preference: string | undefined;
    i = skipOws(i);
    if (valid && text.charCodeAt(i) === 0x3d /* = */) {
      i = skipOws(i + 1);
      const valueStart = i;
      if (text.charCodeAt(i) === 0x22) {
        i = pastQuoted(i);
        if (i < 0) break; // not closed: the rest of the value is inside it, no element follows
        preference = text.slice(valueStart + 1, i - 1).replace(/\\(.)/g, '$1');
      } else {
        while (i < end && !isOws(text.charCodeAt(i)) && !',;"'.includes(text.charAt(i))) i++;
        preference = text.slice(valueStart, i);
      }
      i = skipOws(i);
    }
    // The element ends at the next comma outside a quoted string; its parameters are not read.
    if (i < end && text.charCodeAt(i) !== 0x2c /* , */ && text.charCodeAt(i) !== 0x3b /* ; */) valid = false;
    while (i >= 0 && i < end && text.charCodeAt(i) !== 0x2c) i = text.charCodeAt(i) === 0x22 ? pastQuoted(i) : i + 1;
    if (i < 0) break;
    if (valid && !seen.has(name)) seen.set(name, preference);
    at = i + 1;
  }
  return seen;
}

/**
 * The Idempotency-Key of a request: undefined when absent, 'malformed' when sent more than once
 * (Node would join two lines into one valid-looking value) or not 1 to 255 printable ASCII
 * characters (space to tilde; the ends are trimmed, as for every field value).
 */
export function readIdempotencyKey(rawHeaders: readonly string[]): string | 'malformed' | undefined {
  let value: string | undefined;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (rawHeaders[i]!.toLowerCase() !== 'idempotency-key') continue;
    if (value !== undefined) return 'malformed';
    value = rawHeaders[i + 1]!.trim();
  }
  if (value === undefined) return undefined;
  return /^[\x20-\x7e]{1,255}$/.test(value) ? value : 'malformed';
}

/**
 * Statuses whose answer a key keeps and replays (docs/interfaces.md §11: 200, 202, 404 and 409); after
 * any other the key is forgotten. A 404 is kept as that section says, and takes room in the
 * network's quota like any kept key, which is what bounds keys spent on agents outside the network.
 */
const finalStatuses = new Set([200, 202, 404, 409]);
/**
 * The headers a replay restores besides the status and body. The API version among them: a replay
 * answers in the version of the first request, whatever version the repeat names.
 */
const replayedHeaders = ['content-type', 'location', 'preference-applied', apiVersionHeader] as const;

export interface HeldKey extends KeyClaim {
  /** The change a dead earlier holder of the key made already, if any. */
  changeId: string | null;
}

/**
 * The Idempotency-Key of the status change. Before the handler (after authentication, the rate
 * limit and validation): a malformed key is a 400; a key of the network is claimed, or its first
 * answer replayed, or answered 409 while its first request runs, or 422 when it was used for another
 * body. When the answer of a request holding a claim is sent, a final one is kept for 24 hours and a
 * non-final one forgets the key (the repeat runs again), unless the request's change was committed
 * (a 500 whose database answer was lost, say): then the key stays and its claim ends at once, so a
 * repeat takes it over and answers as that change stands without making it again. A replica that
 * dies in between leaves the claim to run out after `leaseMs`; a repeat then takes it over the same
 * way.
 */
export function idempotencyHooks(keys: IdempotencyKeys, metrics: Metrics, leaseMs: number, isApiKey: (value: string) => boolean) {
  const held = new WeakMap<FastifyRequest, HeldKey>();
  const answers = (answer: string) => metrics.convenienceAnswers.labels({ route: statusChangeRouteLabel, answer });

  const claim: preHandlerAsyncHookHandler = async (request, reply) => {
    const key = readIdempotencyKey(request.raw.rawHeaders);
    if (key === undefined) return;
    // A value holding a partner key anywhere is never stored: refused like a malformed key, and not echoed.
    if (key === 'malformed' || isApiKey(key)) return sendProblem(reply, problem('validation', convenienceTexts.malformedKey, request.id));
    const { networkId } = request.partner!;
    const { agentId, enabled } = request.body as { agentId: string; enabled: boolean };
    const claimToken = randomUUID();
    // Only the digest goes further: the partner's value is stored nowhere.
    const digest = idempotencyKeyDigest(networkId, key);
    const outcome = await keys.claim(networkId, digest, { agentId, enabled }, claimToken, leaseMs);
    switch (outcome.kind) {
      case 'claimed':
        held.set(request, { networkId, key: digest, claimToken, changeId: outcome.changeId });
        return;
      case 'replay': {
        answers('replayed').inc();
        request.audit.outcome = 'replayed';
        // An answer kept before versions existed was given in the default version.
        const headers = { [apiVersionHeader]: defaultApiVersion, ...outcome.answer.headers };
        reply.code(outcome.answer.status).headers(headers).header('idempotent-replayed', 'true');
        return reply.send(outcome.answer.body);
      }
      case 'in_use':
        answers('key_in_use').inc();
        request.audit.outcome = 'key_in_use';
        reply.header('retry-after', String(outcome.retryAfterSeconds));
        return sendProblem(reply, problem('idempotencyKeyInUse', convenienceTexts.keyInUse, request.id));
      case 'reused':
        answers('key_reused').inc();
        request.audit.outcome = 'key_reused';
        return sendProblem(reply, problem('idempotencyKeyReused', convenienceTexts.keyReused, request.id));
      case 'over_quota':
        answers('key_quota').inc();
        metrics.requestsLimited.inc({ partner: request.partner!.name, limit: 'idempotency_keys' });
        request.audit.outcome = 'limited';
        reply.header('retry-after', String(outcome.retryAfterSeconds));
        return sendProblem(reply, problem('idempotencyKeyQuota', convenienceTexts.keyQuota, request.id));
    }
  };

  const settle: onSendAsyncHookHandler = async (request, reply, payload) => {
    const key = held.get(request);
    if (!key) return payload;
    held.delete(request);
    try {
      if (finalStatuses.has(reply.statusCode)) {
        await keys.finish(key, { status: reply.statusCode, headers: headersToReplay(reply), body: String(payload) });
      } else {
        await keys.release(key);
      }
    } catch (error) {
      // The answer stands; the claim runs out by itself and a repeat then takes it over.
      request.log.warn({ reason: (error as Error).message, ...sqlstateFields(error) }, 'idempotency key not settled');
    }
    return payload;
  };

  return { claim, settle, held: (request: FastifyRequest) => held.get(request) };
}

function headersToReplay(reply: FastifyReply): Record<string, string> {
  const kept: Record<string, string> = {};
  for (const name of replayedHeaders) {
    const value = reply.getHeader(name);
    if (value !== undefined) kept[name] = String(value);
  }
  return kept;
}
