import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setThreads } from '@anvil/engine';
import { ByteTokenizer, loadHfTokenizerFromDir } from '@anvil/tokenizer';
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
      return replicaUrls(config).map(
        (url) => new VllmBackend({ url, model: config.INFERENCE_MODEL, loadTimeoutMs: config.WEIGHT_LOAD_TIMEOUT_MS }),
      );
    case 'sglang':
      return replicaUrls(config).map((url) => new SglangBackend({ url, loadTimeoutMs: config.WEIGHT_LOAD_TIMEOUT_MS }));
    case 'embedded': {
      // Without EMBEDDED_CHECKPOINT_DIR the engine serves its built-in tiny random model (seed 0):
      // enough to boot and test the service; the replica id says so in logs and /replicas.
      const dir = config.EMBEDDED_CHECKPOINT_DIR || undefined;
      if (config.ENGINE_THREADS) setThreads(config.ENGINE_THREADS);
      const generator = await createEngineGenerator(dir, { seed: 0, maxBatch: config.EMBEDDED_MAX_BATCH });
      // Constrained decoding compiles grammars over the served vocabulary: the checkpoint's
      // tokenizer.json, or the built-in model's byte tokenizer (loaded on first use).
      const tokenizer = dir
        ? existsSync(join(dir, 'tokenizer.json'))
          ? () => loadHfTokenizerFromDir(dir)
          : null
        : () => new ByteTokenizer();
      return [
        dir
          ? new EmbeddedBackend(generator, 'embedded', dir, tokenizer)
          : new EmbeddedBackend(generator, 'embedded-tiny-random-seed0', 'built-in tiny model (random init, seed 0)', tokenizer),
      ];
    }
  }
}
