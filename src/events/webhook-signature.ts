import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';

/**
 * Standard Webhooks 1.0 signing: `webhook-signature` holds one `v1,<base64 HMAC-SHA256 of
 * id.timestamp.body>` per secret that signs (two during a rotation), space-separated.
 */

/** A new signing secret, `whsec_` and the base64 of 32 random bytes. */
export function newSigningSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

/** The three headers of one attempt; `at` is the attempt's time (webhook-timestamp, in seconds). */
export function signedHeaders(id: string, at: Date, body: string, secrets: readonly string[]): Record<string, string> {
  return {
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': secrets.map((secret) => new Webhook(secret).sign(id, at, body)).join(' '),
  };
}
