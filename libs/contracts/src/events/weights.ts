import { z } from 'zod';
import { id, policyVersion, timestampMs } from './common';

/** The trainer wrote a checkpoint; inference reloads it. */
export const weightsPublishedV1 = z.object({
  version: policyVersion(),
  parentVersion: policyVersion().nullable(),
  step: z.number().int().nonnegative(),
  checkpointId: id(),
  /** Where the Hugging Face layout (config.json + safetensors) lives: a path or URL. */
  checkpointUri: z.string().min(1),
  format: z.literal('hf-safetensors'),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  publishedAt: timestampMs(),
});
export type WeightsPublishedV1 = z.infer<typeof weightsPublishedV1>;

/** What a published checkpoint holds: the whole model, or a LoRA adapter to apply to a base. */
export const PUBLISHED_WEIGHTS = ['full', 'lora-adapter'] as const;
export type PublishedWeights = (typeof PUBLISHED_WEIGHTS)[number];

/**
 * v2: v1 + what the checkpoint holds. `weights: 'full'` (or absent, as in every v1 event):
 * checkpointUri is a whole Hugging Face model (config.json + safetensors). `'lora-adapter'`:
 * checkpointUri is a PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors;
 * sha256 is checkpointDigest over those two files) trained on `base`, the Hugging Face directory
 * of the frozen base weights, whose engine fingerprint (sha256 over the base tensors' names,
 * shapes and float32 values) a consumer checks before applying the adapter to it.
 */
export const weightsPublishedV2 = weightsPublishedV1
  .safeExtend({
    weights: z
      .enum(PUBLISHED_WEIGHTS)
      .optional()
      .describe("'full' (or absent): checkpointUri is a whole model; 'lora-adapter': a PEFT LoRA adapter directory to apply to base"),
    base: z
      .object({
        checkpointUri: z.string().min(1).describe('the Hugging Face directory of the frozen base weights the adapter was trained on'),
        fingerprint: z
          .string()
          .regex(/^sha256:[0-9a-f]{64}$/)
          .describe("the engine's baseFingerprint(): sha256 over the base tensors' names, shapes and float32 values"),
      })
      .optional()
      .describe("only with weights 'lora-adapter'"),
  })
  .superRefine((v, ctx) => {
    if (v.weights === 'lora-adapter' && v.base === undefined)
      ctx.addIssue({ code: 'custom', path: ['base'], message: 'a LoRA adapter names the base checkpoint it applies to' });
    if (v.weights !== 'lora-adapter' && v.base !== undefined)
      ctx.addIssue({ code: 'custom', path: ['base'], message: "only a LoRA adapter (weights: 'lora-adapter') has a base" });
  });
export type WeightsPublishedV2 = z.infer<typeof weightsPublishedV2>;

/** An inference deployment activated a policy version (all new tokens carry it). */
export const policyVersionActivatedV1 = z.object({
  version: policyVersion(),
  deployment: id(),
  swapPolicy: z.enum(['drain-then-swap', 'abort-and-resume']),
  activatedAt: timestampMs(),
});
export type PolicyVersionActivatedV1 = z.infer<typeof policyVersionActivatedV1>;
