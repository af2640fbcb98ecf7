export { Outbox, type OutboxOptions } from './outbox';
