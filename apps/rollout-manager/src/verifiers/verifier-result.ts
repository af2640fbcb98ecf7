import { z } from 'zod';
import type { VerifyResult } from '../environments/types';

/** The verifier failed (threw, hung, answered garbage): the rollout ends as env_error. */
export class VerifierError extends Error {
  override readonly name = 'VerifierError';
}

const resultSchema = z.object({
  outcomeReward: z.number().finite(),
  success: z.boolean().optional(),
  processRewards: z.array(z.number().finite()).optional(),
  detail: z.string().max(10_000).optional(),
});

/** A verifier's answer checked; `what` names the verifier in the error when it is garbage. */
export function checked(value: unknown, what: string): VerifyResult {
  const r = resultSchema.safeParse(value);
  if (!r.success)
    throw new VerifierError(
      `${what} answered garbage: ${r.error.issues.map((i) => `${i.path.join('.') || '(result)'}: ${i.message}`).join(', ')}`,
    );
  return {
    outcomeReward: r.data.outcomeReward,
    success: r.data.success ?? r.data.outcomeReward > 0,
    processRewards: r.data.processRewards,
    detail: r.data.detail,
  };
}
