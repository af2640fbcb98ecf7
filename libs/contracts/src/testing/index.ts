// The event fixtures every project's tests share, imported as `@anvil/contracts/testing`.
// Excluded from builds (tsconfig.build.json) and never exported by the production barrel.
//   builders:      one rollout's events, validated, with payload overrides (stores, consumers)
//   sample-events: every event type with byte-exactness traps, ordering events, bitExact (buses, codecs)
//   fixtures:      a realistic llm_call.recorded of any size (codecs, benchmarks)
export * from './builders';
export * from './fixtures';
export * from './sample-events';
