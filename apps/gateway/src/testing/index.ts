/** Test support of the gateway (`@anvil/gateway/testing`): excluded from builds, imported by specs, tests and benches only. */
export * from './gateway-harness';
export * from './fake-inference-proxy';
// The capture pipeline's parts, for the tests that crash and recover it piece by piece.
export { CaptureStore, storedCapture, type CaptureState } from '../capture/capture-store';
export { OutboxRelay } from '../capture/outbox-relay';
export { RecordCommitter, type CommitRequest } from '../capture/record-committer';
export { SqlClient } from '../db/sql-client';
