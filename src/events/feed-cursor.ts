import type { FeedPosition } from '../stores/event-feed.js';

/**
 * The feed's cursor (docs/interfaces.md §17): opaque to partners, a position of the order of
 * docs/events-order.md inside (batch id, position within the batch, or the whole batch). Base64url,
 * versioned, so its inside may change without breaking cursors partners hold. It names a place in
 * the deployment's order only: it grants nothing, every read is restricted to the key's network.
 */
const version = '1';
const maxBigint = 9_223_372_036_854_775_807n;
const shape = /^1:(\d{1,19}):(\d{0,19})$/;

export function encodeCursor(position: FeedPosition): string {
  return Buffer.from(`${version}:${position.batch}:${position.position ?? ''}`, 'utf8').toString('base64url');
}

/** The position a cursor names, or undefined when it is not one this service made. */
export function decodeCursor(cursor: string): FeedPosition | undefined {
  if (cursor.length === 0 || cursor.length > 64 || !/^[A-Za-z0-9_-]+$/.test(cursor)) return undefined;
  const match = shape.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  if (!match) return undefined;
  const [, batch, position] = match as unknown as [string, string, string];
  const numbers = [batch, position].filter((n) => n !== '');
  if (numbers.some((n) => BigInt(n) > maxBigint || (n.length > 1 && n.startsWith('0')))) return undefined;
  // Canonical only: one cursor per position, so a cursor read twice is the same string.
  const decoded = { batch, position: position === '' ? null : position };
  return encodeCursor(decoded) === cursor ? decoded : undefined;
}

/** Whether `a` comes after `b` in the order. A whole-batch position is after every event of its batch. */
export function isAfter(a: FeedPosition, b: FeedPosition): boolean {
  const [batchA, batchB] = [BigInt(a.batch), BigInt(b.batch)];
  if (batchA !== batchB) return batchA > batchB;
  if (a.position === null) return b.position !== null;
  if (b.position === null) return false;
  return BigInt(a.position) > BigInt(b.position);
}
