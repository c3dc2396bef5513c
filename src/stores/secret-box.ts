import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';

/**
 * Webhook signing secrets at rest (docs/interfaces.md §14): AES-256-GCM with a key derived (HKDF-
 * SHA256) from the secret the service is given (WEBHOOK_SECRETS_KEY / _FILE), the endpoint's id as
 * associated data, so a sealed secret copied onto another endpoint's row does not open. A stored
 * value is `v1:` and base64 of nonce (12 bytes), tag (16) and ciphertext. Rows written before
 * encryption hold the secret itself (`whsec_…`): they are read as they are, and the service seals
 * them at start.
 */
export interface SecretBox {
  seal(secret: string, endpointId: string): string;
  open(stored: string, endpointId: string): string;
}

const prefix = 'v1:';

/** The key of `npm run dev` and of the tests when no key is given (never in production: config refuses). */
export const developmentSecretsKey = 'partner-agent-status development webhook secrets key';

export function isSealed(stored: string): boolean {
  return stored.startsWith(prefix);
}

export function createSecretBox(keyMaterial: string): SecretBox {
  const key = Buffer.from(hkdfSync('sha256', Buffer.from(keyMaterial, 'utf8'), 'partner-agent-status', 'webhook signing secrets v1', 32));
  return {
    seal(secret, endpointId) {
      const nonce = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, nonce);
      cipher.setAAD(Buffer.from(endpointId, 'utf8'));
      const sealed = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
      return prefix + Buffer.concat([nonce, cipher.getAuthTag(), sealed]).toString('base64');
    },
    open(stored, endpointId) {
      if (!isSealed(stored)) return stored;
      const raw = Buffer.from(stored.slice(prefix.length), 'base64');
      const decipher = createDecipheriv('aes-256-gcm', key, raw.subarray(0, 12));
      decipher.setAAD(Buffer.from(endpointId, 'utf8'));
      decipher.setAuthTag(raw.subarray(12, 28));
      return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
    },
  };
}
