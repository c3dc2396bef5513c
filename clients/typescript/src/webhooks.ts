import type { components } from './generated/event.js';

/** An event as the service sends it (CloudEvents 1.0, structured JSON): a webhook call's body. */
export type PartnerEvent = components['schemas']['Event'];

/** A webhook call that must not be trusted: unsigned, signed with no secret given, or too old or new. */
export class WebhookVerificationError extends Error {
  override name = 'WebhookVerificationError';
}

export interface VerifyWebhookOptions {
  /** How far webhook-timestamp may be from the clock, in seconds (default 300, as Standard Webhooks). */
  toleranceSeconds?: number;
  /** The clock (for tests). */
  now?: () => number;
}

type HeaderSource = Headers | Record<string, string | string[] | undefined>;

function header(headers: HeaderSource, name: string): string | undefined {
  if (typeof (headers as Headers).get === 'function') return (headers as Headers).get(name) ?? undefined;
  const record = headers as Record<string, string | string[] | undefined>;
  const value = record[name] ?? Object.entries(record).find(([key]) => key.toLowerCase() === name)?.[1];
  return Array.isArray(value) ? value.join(' ') : value;
}

function base64Bytes(text: string): Uint8Array<ArrayBuffer> | undefined {
  try {
    return Uint8Array.from(atob(text), (character) => character.charCodeAt(0));
  } catch {
    return undefined;
  }
}

/** A `whsec_<base64>` secret (or bare base64) as an HMAC-SHA256 key of Web Crypto. */
async function hmacKey(secret: string) {
  const bytes = base64Bytes(secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret);
  if (!bytes || bytes.length === 0) throw new TypeError('a webhook secret must be whsec_ and base64');
  return globalThis.crypto.subtle.importKey('raw', bytes, { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']);
}

/**
 * Verifies a webhook call as Standard Webhooks 1.0 defines it and returns its event: one of the `v1`
 * signatures of `webhook-signature` must be the HMAC-SHA256 of `<webhook-id>.<webhook-timestamp>.<body>`
 * under one of `secrets` (give both while a rotated secret overlaps the new one), and the timestamp
 * within the tolerance of the clock. `payload` is the raw body as received, before any JSON parsing.
 * Throws WebhookVerificationError otherwise. Uses only Web Crypto (Node 20+, browsers, edge runtimes).
 */
export async function verifyWebhook(
  payload: string | Uint8Array,
  headers: HeaderSource,
  secrets: string | readonly string[],
  options: VerifyWebhookOptions = {},
): Promise<PartnerEvent> {
  const id = header(headers, 'webhook-id');
  const timestamp = header(headers, 'webhook-timestamp');
  const signatures = header(headers, 'webhook-signature');
  if (!id || !timestamp || !signatures)
    throw new WebhookVerificationError('webhook-id, webhook-timestamp and webhook-signature are required');
  if (!/^\d+$/.test(timestamp)) throw new WebhookVerificationError('webhook-timestamp is not a number of seconds');
  const nowSeconds = Math.floor((options.now?.() ?? Date.now()) / 1000);
  if (Math.abs(nowSeconds - Number(timestamp)) > (options.toleranceSeconds ?? 300)) {
    throw new WebhookVerificationError('webhook-timestamp is outside the tolerance: refusing a call that may be replayed');
  }
  const body = typeof payload === 'string' ? new TextEncoder().encode(payload) : payload;
  const prefix = new TextEncoder().encode(`${id}.${timestamp}.`);
  const signed = new Uint8Array(prefix.length + body.length);
  signed.set(prefix);
  signed.set(body, prefix.length);
  const candidates = signatures
    .split(' ')
    .filter((signature) => signature.startsWith('v1,'))
    .map((signature) => base64Bytes(signature.slice(3)))
    .filter((bytes) => bytes !== undefined);
  const keys = await Promise.all((typeof secrets === 'string' ? [secrets] : secrets).map(hmacKey));
  for (const key of keys) {
    for (const signature of candidates) {
      // subtle.verify compares in constant time.
      if (await globalThis.crypto.subtle.verify('HMAC', key, signature, signed)) {
        return JSON.parse(new TextDecoder().decode(body)) as PartnerEvent;
      }
    }
  }
  throw new WebhookVerificationError('no signature of webhook-signature matches a given secret');
}
