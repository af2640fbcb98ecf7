import { GatewayError } from '../errors';
import { constantTimeEqual } from './api-key';
import { bearer } from './session-auth';

/** The admin API's credential (GATEWAY_ADMIN_TOKEN), compared in constant time. Session keys never pass. */
export function assertAdmin(authorization: string | undefined, adminToken: string): void {
  const token = bearer(authorization);
  if (!token || !constantTimeEqual(token, adminToken)) throw GatewayError.unauthorized('invalid admin credential', 'invalid_admin_token');
}
