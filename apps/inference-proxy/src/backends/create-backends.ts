import type { InferenceProxyConfig } from '../config';
import { replicaUrls } from '../config';
import type { InferenceBackend } from './backend';
import { EmbeddedBackend } from './embedded-backend';
import { createEngineGenerator } from './embedded-generator';
import { SglangBackend } from './sglang-backend';
import { VllmBackend } from './vllm-backend';

/** The configured replicas. Rejects (with the engine's clear message) when the embedded engine cannot generate. */
export async function createBackends(config: InferenceProxyConfig): Promise<InferenceBackend[]> {
  switch (config.INFERENCE_BACKEND) {
    case 'vllm':
      return replicaUrls(config).map((url) => new VllmBackend({ url, model: config.INFERENCE_MODEL, loadTimeoutMs: config.WEIGHT_LOAD_TIMEOUT_MS }));
    case 'sglang':
      return replicaUrls(config).map((url) => new SglangBackend({ url, loadTimeoutMs: config.WEIGHT_LOAD_TIMEOUT_MS }));
    case 'embedded': {
      return [new EmbeddedBackend(await createEngineGenerator(config.EMBEDDED_CHECKPOINT_DIR))];
    }
  }
}
