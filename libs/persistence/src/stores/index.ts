export { ProcessedEventStore } from './processed-event-store';
export { inTransaction, insertIgnoringDuplicates, upsertRows } from './transaction';
