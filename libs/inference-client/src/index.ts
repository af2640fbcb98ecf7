// @anvil/inference-client: the typed client of the inference-proxy's token-level internal API.
export * from './inference-proxy-client';
