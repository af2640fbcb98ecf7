import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * Session API keys: `anvil-<sessionId>.<secret>`, the secret being 32 random bytes (base64url).
 * The key names its session, so one lookup by primary key finds the row, and the sha256 of the
 * whole key must then equal the stored hash (compared in constant time). The key is only ever
 * shown once, in the admin API's answer; the database holds its hash.
 *
 * The per-session base URL is `/sessions/<the whole key>/v1`: the path segment IS the secret,
 * so the URL form is exactly as unguessable as the key, and `/sessions/<sessionId>/v1` (or any
 * segment whose secret part is wrong) opens nothing.
 */
const PREFIX = 'anvil-';
/** Session ids and secrets are base64url; '.' separates them. */
const KEY_PATTERN = /^anvil-(sess_[A-Za-z0-9_-]{16,64})\.([A-Za-z0-9_-]{43})$/;

export interface IssuedKey {
  sessionId: string;
  apiKey: string;
  keyHash: string;
}

export function newSessionId(): string {
  return `sess_${randomBytes(16).toString('base64url')}`;
}

export function issueKey(sessionId: string = newSessionId()): IssuedKey {
  const apiKey = `${PREFIX}${sessionId}.${randomBytes(32).toString('base64url')}`;
  return { sessionId, apiKey, keyHash: hashKey(apiKey) };
}

export const hashKey = (key: string): string => createHash('sha256').update(key, 'utf8').digest('hex');

/** The session id a well-formed key names, or null (a malformed key names nothing). */
export function sessionIdOfKey(key: string): string | null {
  const m = KEY_PATTERN.exec(key);
  return m ? m[1] : null;
}

/** Constant-time equality of two strings (hashed first, so lengths leak nothing either). */
export function constantTimeEqual(a: string, b: string): boolean {
  const ha = createHash('sha256').update(a, 'utf8').digest();
  const hb = createHash('sha256').update(b, 'utf8').digest();
  return timingSafeEqual(ha, hb);
}

/** Whether `key` hashes to `storedHash` (hex), in constant time. */
export function keyMatches(key: string, storedHash: string): boolean {
  const actual = Buffer.from(hashKey(key), 'hex');
  const expected = Buffer.from(storedHash, 'hex');
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}
