/** Test support of the Data Pool (`@anvil/middleware/testing`): excluded from builds, imported by specs, tests and benches only. */
export * from '../data-pool/testing/pool-events';
export { describePoolBadInput } from '../data-pool/testing/pool-bad-input.suite';
export { describePoolBehaviour } from '../data-pool/testing/pool-behaviour.suite';
export { describePoolFilters } from '../data-pool/testing/pool-filters.suite';
export { describeIngestionBehaviour } from '../data-pool/testing/ingestion-behaviour.suite';
export { describeStoreBehaviour } from '../data-pool/projections/testing/store-behaviour.suite';
export { describeBatchBehaviour } from '../data-pool/projections/testing/batch-behaviour.suite';
export { EventStore } from '../data-pool/projections';
