// Protocol fixtures of external inference backends (vLLM, SGLang) for tests and benches.
export * from './fixture-model';
export * from './vllm-fixture';
export * from './sglang-fixture';
export * from './spawn-vllm-fixture';
