import { z } from 'zod';
import { port, serviceBaseEnv } from '@anvil/config';

export const trainerEnv = z.object({
  ...serviceBaseEnv,
  PORT: port(8084),
  HOST: z.string().default('127.0.0.1'),
  /** Where checkpoints (Hugging Face layout) are written and published from. */
  CHECKPOINT_DIR: z.string({ error: 'is required (a writable directory)' }).min(1, 'is required (a writable directory)'),
  ENGINE_THREADS: z.coerce.number().int().positive().default(2),
});
export type TrainerConfig = z.infer<typeof trainerEnv>;
