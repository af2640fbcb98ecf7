import { z } from 'zod';
import { port, positiveInt, serviceBaseEnv } from '@anvil/config';

const nonNegativeInt = (fallback: number) => z.coerce.number().int().nonnegative().default(fallback);

export const inferenceProxyEnv = z
  .object({
    ...serviceBaseEnv,
    PORT: port(8081),
    HOST: z.string().default('127.0.0.1'),
    /** Which backend serves generations: the embedded engine, or external vLLM / SGLang replicas. */
    INFERENCE_BACKEND: z.enum(['embedded', 'vllm', 'sglang']).default('embedded'),
    /** Comma-separated replica base URLs for vllm/sglang. */
    INFERENCE_REPLICAS: z.string().default(''),
    /** vLLM: the served model name sent as `model` (omit to let vLLM use its only model). */
    INFERENCE_MODEL: z.string().optional(),
    /** embedded: the checkpoint directory (HF layout) the engine starts from. */
    EMBEDDED_CHECKPOINT_DIR: z.string().optional(),
    /** embedded: sequences the engine decodes together at most (further requests wait for a slot). Match it to the rollouts in flight. */
    EMBEDDED_MAX_BATCH: positiveInt(32),
    /** embedded: threads per engine call (OpenMP kernels and OpenBLAS); unset: the engine's default (ANVIL_ENGINE_THREADS, else 2). */
    ENGINE_THREADS: z.coerce.number().int().positive().optional(),
    WEIGHT_SWAP_POLICY: z.enum(['drain-then-swap', 'abort-and-resume']).default('drain-then-swap'),
    /** drain-then-swap: generations still running after this are interrupted and resumed under the new weights (0 = wait forever). */
    WEIGHT_DRAIN_TIMEOUT_MS: nonNegativeInt(120_000),
    /** How long one replica may take to load a checkpoint. */
    WEIGHT_LOAD_TIMEOUT_MS: positiveInt(600_000),
    /** Policy version of the weights the replicas were started with. */
    INITIAL_POLICY_VERSION: nonNegativeInt(0),
    /** Names this deployment in policy_version.activated (several proxies may front different clusters). */
    DEPLOYMENT_NAME: z.string().min(1).max(128).default('default'),
    WEIGHTS_CONSUMER_GROUP: z.string().min(1).default('anvil.inference-proxy.weights'),
    HEALTH_INTERVAL_MS: positiveInt(2_000),
    /** Consecutive failed checks (or unreachable generations) that take a replica out of rotation. */
    HEALTH_FAILURE_THRESHOLD: positiveInt(3),
    /** Consecutive good checks that bring it back. */
    HEALTH_RECOVERY_THRESHOLD: positiveInt(2),
    /** Above this many running generations a session's replica is bypassed for the least-loaded one. */
    MAX_IN_FLIGHT_PER_REPLICA: positiveInt(64),
    /** Replicas one request may fail on before it gives up. */
    MAX_ATTEMPTS_PER_REQUEST: positiveInt(3),
    /** A generation running longer is aborted and returns what it has. */
    REQUEST_TIMEOUT_MS: positiveInt(600_000),
  })
  .superRefine((env, ctx) => {
    if (env.INFERENCE_BACKEND !== 'embedded' && env.INFERENCE_REPLICAS.trim() === '') {
      ctx.addIssue({
        code: 'custom',
        path: ['INFERENCE_REPLICAS'],
        message: `is required when INFERENCE_BACKEND=${env.INFERENCE_BACKEND}`,
      });
    }
    for (const url of env.INFERENCE_REPLICAS.split(',')
      .map((s) => s.trim())
      .filter(Boolean)) {
      if (!/^https?:\/\/\S+$/.test(url))
        ctx.addIssue({ code: 'custom', path: ['INFERENCE_REPLICAS'], message: `${JSON.stringify(url)} is not an http(s) URL` });
    }
  });
export type InferenceProxyConfig = z.infer<typeof inferenceProxyEnv>;

export const replicaUrls = (config: InferenceProxyConfig) =>
  config.INFERENCE_REPLICAS.split(',')
    .map((s) => s.trim())
    .filter(Boolean);
