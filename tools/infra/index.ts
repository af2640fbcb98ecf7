// The local infrastructure's API (`@anvil/infra`) for TypeScript hosts: the implementation is the
// plain ESM module lib.mjs (the test runner and the CLI start it without a build); its types are
// lib.d.mts.
export * from './lib.mjs';
