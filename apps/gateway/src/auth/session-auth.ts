import type { GatewaySession } from '@anvil/persistence';
import { GatewayError } from '../errors';
import type { SessionLookup, SessionLookups } from '../sessions/session-lookups';
import type { SessionStore } from '../sessions/session-store';
import { constantTimeEqual, keyMatches, sessionIdOfKey } from './api-key';

/**
 * Finds the one session a request may touch. The credential is the session key, taken from the
 * per-session URL's path segment when the request came that way (the segment is the key), else
 * from `Authorization: Bearer <key>`. The key names its session; nothing else in the request
 * does, so a key can only ever reach its own session.
 *
 *  - no key, a malformed key, an unknown session (Bearer form), a wrong secret → 401
 *  - a per-session URL with an `Authorization` header carrying another Anvil key → 401 (a
 *    placeholder that is not an Anvil key, which SDKs insist on sending, is ignored)
 *  - a per-session URL whose segment names no session → 404
 *  - a closed or expired session → 410
 * The row is read from PostgreSQL on every call, so a close is seen by every instance at once.
 */
export class SessionAuthenticator {
  constructor(
    private readonly sessions: SessionStore,
    private readonly lookups: SessionLookups,
  ) {}

  async authenticate(authorization: string | undefined, pathKey: string | undefined): Promise<GatewaySession> {
    return (await this.authenticateCall(authorization, pathKey, [])).session;
  }

  /**
   * authenticate(), also fetching (in the same database round trip) the capture row the call
   * would extend: the deepest answered call of the session whose reply fingerprint is among
   * `fingerprints`. The match is only returned once the key is proven to own the session.
   */
  async authenticateCall(
    authorization: string | undefined,
    pathKey: string | undefined,
    fingerprints: readonly string[],
  ): Promise<SessionLookup> {
    const viaUrl = pathKey !== undefined;
    const header = bearer(authorization);
    const key = viaUrl ? pathKey : header;
    if (!key) throw GatewayError.unauthorized('missing API key: send `Authorization: Bearer <session key>` or use the session base URL');
    const sessionId = sessionIdOfKey(key);
    if (!sessionId) throw viaUrl ? notFound() : GatewayError.unauthorized('invalid API key');
    const found = await this.lookups.find(sessionId, fingerprints);
    if (!found) throw viaUrl ? notFound() : GatewayError.unauthorized('invalid API key');
    if (viaUrl && header?.startsWith(KEY_PREFIX) && !constantTimeEqual(header, key)) {
      throw GatewayError.unauthorized(
        "the Authorization header carries another session key than the session URL: send that URL's key, or any placeholder that is not an Anvil key",
      );
    }
    const { session } = found;
    if (!keyMatches(key, session.keyHash)) throw GatewayError.unauthorized('invalid API key');
    if (session.status === 'closed') throw gone(session.closeReason === 'expired' ? 'session_expired' : 'session_closed');
    if (session.expiresAt && session.expiresAt.getTime() <= Date.now()) {
      await this.sessions.close(session.id, 'expired');
      throw gone('session_expired');
    }
    return found;
  }
}

const KEY_PREFIX = 'anvil-';

export function bearer(authorization: string | undefined): string | null {
  if (!authorization) return null;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  return m ? m[1] : null;
}

const notFound = () => GatewayError.sessionNotFound();
const gone = (code: 'session_closed' | 'session_expired') =>
  new GatewayError('gone', code === 'session_expired' ? 'this session has expired' : 'this session is closed', code);
