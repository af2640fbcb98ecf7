/** Test support of the gateway (`@anvil/gateway/testing`): excluded from builds, imported by specs, tests and benches only. */
export * from './gateway-harness';
export * from './fake-inference-proxy';
