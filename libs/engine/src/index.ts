// @anvil/engine: the native CPU training engine for Llama/Qwen2-family models (see README.md).
export * from './config';
export * from './model';
export * from './lora';
export {
  ADAPTER_CONFIG_FILE,
  ADAPTER_OPTIMIZER_FILE,
  ADAPTER_WEIGHTS_FILE,
  LoraAdapterError,
  readAdapter,
  weightsFingerprint,
  type ReadAdapter,
} from './lora-adapter';
export * from './generator';
export * from './safetensors';
export * from './checkpoint-digest';
export { cudaAvailability, kernelChecks, modelChecks, type CudaCheck } from './cuda-checks';
export { loadEngine, loadBackend, selectEngine, engineInfo, setThreads, getThreads, findRepoRoot, EngineLoadError } from './loader';
export type { Backend, EngineSelection } from './loader';
export type {
  NativeAddon,
  NativeDeviceInfo,
  NativeGeneratorStats,
  NativeInfo,
  NativeKernelCheck,
  NativeLoraConfig,
  NativeStepResult,
  NativeTreeInfo,
  SgemmMode,
} from './native';

import { loadEngine } from './loader';
import type { NativeTreeInfo, SgemmMode } from './native';

/** DFS pre-order, subtree ends and depths of a packed tree, exactly as the engine derives them. */
export function analyzeTree(parents: Int32Array): NativeTreeInfo {
  return loadEngine().addon.analyzeTree(parents);
}

/** Times OpenBLAS cblas_sgemm on this machine for one GEMM shape (benchmark helper; see SgemmMode). */
export function benchSgemm(M: number, N: number, K: number, mode: SgemmMode = 'nt', minSeconds = 0.5) {
  return loadEngine().addon.benchSgemm(M, N, K, mode, minSeconds);
}
