import { z } from 'zod';
import { port, serviceBaseEnv } from '@anvil/config';

export const inferenceProxyEnv = z.object({
  ...serviceBaseEnv,
  PORT: port(8081),
  HOST: z.string().default('127.0.0.1'),
  /** Which backend serves generations: the embedded engine, or external vLLM / SGLang replicas. */
  INFERENCE_BACKEND: z.enum(['embedded', 'vllm', 'sglang']).default('embedded'),
  /** Comma-separated replica base URLs for vllm/sglang. */
  INFERENCE_REPLICAS: z.string().default(''),
  WEIGHT_SWAP_POLICY: z.enum(['drain-then-swap', 'abort-and-resume']).default('drain-then-swap'),
}).superRefine((env, ctx) => {
  if (env.INFERENCE_BACKEND !== 'embedded' && env.INFERENCE_REPLICAS.trim() === '') {
    ctx.addIssue({ code: 'custom', path: ['INFERENCE_REPLICAS'], message: `is required when INFERENCE_BACKEND=${env.INFERENCE_BACKEND}` });
  }
});
export type InferenceProxyConfig = z.infer<typeof inferenceProxyEnv>;
