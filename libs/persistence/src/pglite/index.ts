export { createPgliteDriver, pgliteThreadOf, type PgliteDriverModule, type PgliteDriverOptions } from './pglite-driver';
export { PgliteThread, type PgliteDb } from './pglite-thread';
export { PglitePool, type PglitePoolOptions, type PgliteSession } from './pglite-pool';
export { PgliteClient } from './pglite-client';
export { SessionLock, SessionLockTimeoutError } from './session-lock';
