/**
 * The inference-proxy's public entry point (`@anvil/inference-proxy`): what hosts (the `anvil`
 * CLI's in-process run, tests, benches) may use. Everything else under src/ is the service's own.
 */
export { InferenceProxyModule } from './app.module';
export { inferenceProxyEnv, type InferenceProxyConfig } from './config';
export { InferenceRuntime, type InferenceRuntimeOptions } from './runtime';
export { BackendUnavailableError, type InferenceBackend, type SamplingParams } from './backends/backend';
export { VllmBackend } from './backends/vllm-backend';
export { SglangBackend } from './backends/sglang-backend';
