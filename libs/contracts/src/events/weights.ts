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

/** An inference deployment activated a policy version (all new tokens carry it). */
export const policyVersionActivatedV1 = z.object({
  version: policyVersion(),
  deployment: id(),
  swapPolicy: z.enum(['drain-then-swap', 'abort-and-resume']),
  activatedAt: timestampMs(),
});
export type PolicyVersionActivatedV1 = z.infer<typeof policyVersionActivatedV1>;
