// The headers the app reads on every request, before any route (src/http/app.ts): `x-request-id`
// and `Expect`. Both are partner input on every route, /livez included, so each check is a bounded
// regular expression whose time is linear in the value (test/unit/request-headers.test.ts).
import { randomUUID } from 'node:crypto';

/** A caller's id the service may keep: 1 to 128 of these characters (docs/interfaces.md §3). */
const saneRequestId = /^[A-Za-z0-9._:@/+=-]{1,128}$/;

/**
 * 16 characters in a row (the shortest key the key set takes) of the Base64 and Base64url
 * alphabets, `-` left out so that a UUID (hex groups of at most 12) stays a sane id. Issued keys
 * (`pas_` and 38 Base62 characters) and keys of random characters have such a run.
 */
const keyShapedRun = /[A-Za-z0-9_+/=]{16}/;

/**
 * The request id of a request: the caller's `x-request-id` when it is sane and holds nothing
 * shaped like a key, else a fresh UUID. `keyShaped` says that the caller's value was refused for
 * holding a key-shaped run. The decision reads the value only, never the key set: whether a string
 * is a loaded key must not change the answer (docs/interfaces.md §3).
 */
export function requestIdOf(given: string | string[] | undefined): { id: string; keyShaped: boolean } {
  if (typeof given !== 'string') return { id: randomUUID(), keyShaped: false };
  if (keyShapedRun.test(given)) return { id: randomUUID(), keyShaped: true };
  return { id: saneRequestId.test(given) ? given : randomUUID(), keyShaped: false };
}

/** Node's own test for an Expect it meets (it answers 100 Continue itself); any other expectation is a 417. */
const continueExpectation = /(?:^|\W)100-continue(?:$|\W)/i;

/** Whether an Expect header asks for nothing but what Node meets itself (100-continue). */
export function meetsExpectation(expect: string): boolean {
  return continueExpectation.test(expect);
}
