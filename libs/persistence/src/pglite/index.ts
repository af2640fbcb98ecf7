export { createPgliteDriver, type PgliteDriverModule, type PgliteDriverOptions } from './pglite-driver';
export { PglitePool, type PglitePoolOptions, type PgliteSession } from './pglite-pool';
export { PgliteClient } from './pglite-client';
export { SessionLock, SessionLockTimeoutError } from './session-lock';
