/** Test support of the inference-proxy (`@anvil/inference-proxy/testing`): excluded from builds, imported by specs, tests and benches only. */
export * from './test-runtime';
export { WeightsPublishedHandler } from '../weights/weights-published-handler';
