export { OutboxRelay, type OutboxRelayOptions, type OutboxRow, type OutboxStorage } from './outbox-relay';
