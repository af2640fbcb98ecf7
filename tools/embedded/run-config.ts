/**
 * The main job's run configuration: every knob, validated (unknown or out-of-range knobs are
 * refused with every problem listed), with the defaults of the embedded demo. A user's own run is
 * a JSON file given with `npm run main -- --config run.json`; a few knobs also come from the
 * environment for quick experiments (ANVIL_SEED, ANVIL_MAIN_STEPS, ANVIL_DATA_DIR).
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';

const positiveInt = () => z.number().int().positive();
const nonNegInt = () => z.number().int().nonnegative();

export const runConfigSchema = z
  .object({
    /** Seeds the RL phase: task sampling, the sampler, group order (the warm start has its own, warmStart.seed). */
    seed: nonNegInt().default(1),
    /** Where caches, checkpoints and reports go. */
    dataDir: z.string().min(1).default('.anvil'),
    /** 'tiny' (the built-in Llama-family model over the byte tokenizer) or a Hugging Face model directory. */
    model: z.string().min(1).default('tiny'),
    /** Engine threads per engine call (generation and training run side by side, so 1 each fills 2 cores). */
    engineThreads: positiveInt().default(1),
    task: z
      .object({
        /** 'chain-add' (built in) or a path to a task JSONL file. */
        set: z.string().min(1).default('chain-add'),
        /** chain-add: operands per task (the difficulty knob). */
        kMin: z.number().int().min(2).max(8).default(2),
        kMax: z.number().int().min(2).max(8).default(3),
        maxOperand: z.number().int().min(1).max(100_000).default(9),
        /** 'compact' (no system message, the tool by name) or 'full' (instruction + the tool's JSON schema). */
        prompt: z.enum(['compact', 'full']).default('compact'),
        /** Held-out tasks per evaluation. */
        evalTasks: positiveInt().max(10_000).default(100),
      })
      .strict()
      .default({ set: 'chain-add', kMin: 2, kMax: 3, maxOperand: 9, prompt: 'compact', evalTasks: 100 }),
    warmStart: z
      .object({
        /** Supervised steps on generated demonstrations at most; the lr schedule spans them (0 = start RL from the model as given). */
        steps: nonNegInt().max(100_000).default(1200),
        tasksPerStep: positiveInt().max(4096).default(8),
        lr: z.number().positive().max(1).default(1e-3),
        /** Stop once this fraction of the validation tasks pass at temperature 1 (0 = train all steps): the warm start's budget is a pass rate. */
        targetPassRate: z.number().min(0).max(1).default(0.35),
        /** Measure the validation pass rate every this many steps, from step checkFrom on. */
        checkEvery: positiveInt().max(100_000).default(25),
        checkFrom: nonNegInt().max(100_000).default(200),
        /** Once a check passes fineCheckFrom (default half the target), check every fineCheckEvery steps: the pass rate jumps within a few dozen steps. */
        fineCheckEvery: positiveInt().max(100_000).default(5),
        fineCheckFrom: z.number().min(0).max(1).optional(),
        /** Train-split tasks held out of the demonstrations to measure the pass rate on (never the eval split). */
        validationTasks: nonNegInt().max(10_000).default(100),
        /**
         * Seeds the warm start (its init and data order). Apart from the run seed on purpose: every
         * RL seed starts from the same warm start, as RL seeds in a paper share one SFT checkpoint
         * (the tiny model's SFT is chaotic: the held-out pass rate at a fixed budget swings from 0.1
         * to 0.6 with the init seed), and the cached warm start serves every seed.
         */
        seed: nonNegInt().default(1),
      })
      .strict()
      .default({ steps: 1200, tasksPerStep: 8, lr: 1e-3, targetPassRate: 0.35, checkEvery: 25, checkFrom: 200, fineCheckEvery: 5, validationTasks: 100, seed: 1 }),
    rollouts: z
      .object({
        /** G: samples per task. */
        groupSize: z.number().int().min(2).max(256).default(8),
        /** N: rollouts in flight at once. */
        concurrency: positiveInt().max(4096).default(64),
        /** η: staleness bound in versions (0 = on-policy). */
        eta: nonNegInt().max(64).default(2),
        temperature: z.number().min(0).max(5).default(1),
        maxTokensPerCall: positiveInt().max(32_768).default(64),
      })
      .strict()
      .default({ groupSize: 8, concurrency: 64, eta: 2, temperature: 1, maxTokensPerCall: 64 }),
    scheduler: z
      .object({
        /** B: groups per train batch. */
        groupsPerBatch: positiveInt().max(1024).default(8),
        /** Windowed-FIFO window W in rollouts, or 'adaptive' (default round(0.3N)). */
        window: z.union([positiveInt(), z.literal('adaptive')]).optional(),
        dropZeroVariance: z.boolean().default(true),
      })
      .strict()
      .default({ groupsPerBatch: 8, dropZeroVariance: true }),
    algorithm: z
      .object({
        loss: z.enum(['cispo', 'ppo', 'decoupled_ppo', 'reinforce_tis']).default('cispo'),
        epsLow: z.number().min(0).max(1).optional(),
        epsHigh: z.number().min(0).max(100).optional(),
        aggregation: z.enum(['token_mean', 'trajectory', 'group', 'seq_mean_token_mean', 'constant']).default('token_mean'),
        advantage: z.enum(['grpo', 'dr_grpo', 'rloo', 'reinforce_pp']).default('grpo'),
        /** λ of the process-reward rule: a call's advantage = its rollout's + λ · its normalised process reward (0 = outcome only). */
        processRewardWeight: z.number().min(0).max(100).default(1),
        lr: z.number().positive().max(1).default(1e-4),
        /** Linear lr warm-up over this many optimizer steps (a fresh AdamW's first steps move every weight by ±lr). */
        warmupSteps: nonNegInt().max(100_000).default(20),
        /** 'cosine': after the warm-up the lr decays to minLrFactor · lr at the end of the step budget; 'constant': it stays at lr. */
        lrSchedule: z.enum(['constant', 'cosine']).default('constant'),
        minLrFactor: z.number().min(0).max(1).default(0.1),
        maxGradNorm: z.number().min(0).default(1),
        miniBatches: positiveInt().max(64).default(1),
        beta1: z.number().min(0).lt(1).default(0.9),
        beta2: z.number().min(0).lt(1).default(0.95),
        eps: z.number().min(0).default(1e-15),
      })
      .strict()
      .default({
        loss: 'cispo',
        aggregation: 'token_mean',
        advantage: 'grpo',
        processRewardWeight: 1,
        lr: 1e-4,
        warmupSteps: 20,
        lrSchedule: 'constant',
        minLrFactor: 0.1,
        maxGradNorm: 1,
        miniBatches: 1,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-15,
      }),
    budget: z
      .object({
        /** Train batches (optimizer steps with miniBatches 1) of RL. */
        steps: positiveInt().max(1_000_000).default(90),
        /** Wall-clock cap on the RL phase, seconds (0 = none). */
        seconds: nonNegInt().default(0),
        /** End the RL phase when no train batch came for this many seconds, evaluations aside (0 = wait forever): zero-variance groups are dropped, so a policy that solves every task or none never gets one. */
        stallSeconds: nonNegInt().default(180),
      })
      .strict()
      .default({ steps: 90, seconds: 0, stallSeconds: 180 }),
    eval: z
      .object({
        /** Evaluate held-out tasks every this many policy versions (and before step 1 and at the end). */
        everyVersions: positiveInt().default(30),
        temperature: z.number().min(0).max(5).default(1),
        /**
         * Rollouts per held-out task in each evaluation. Every evaluation draws the same sampler seeds
         * per (task, sample), so two versions are compared on paired samples; more samples per task
         * shrink the noise of each figure (100 tasks x 1 sample at temperature 1: about ±5 points).
         */
        samplesPerTask: positiveInt().max(64).default(4),
      })
      .strict()
      .default({ everyVersions: 30, temperature: 1, samplesPerTask: 4 }),
    /** Full checkpoint (resume point) every this many batches. */
    checkpointEvery: positiveInt().default(30),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.task.kMax < c.task.kMin) ctx.addIssue({ code: 'custom', path: ['task', 'kMax'], message: `must be >= task.kMin (${c.task.kMin})` });
    if (c.rollouts.concurrency < c.rollouts.groupSize)
      ctx.addIssue({ code: 'custom', path: ['rollouts', 'concurrency'], message: `must be >= rollouts.groupSize (${c.rollouts.groupSize}): a group runs at once` });
    if (typeof c.scheduler.window === 'number' && c.scheduler.window > c.rollouts.concurrency)
      ctx.addIssue({ code: 'custom', path: ['scheduler', 'window'], message: `must be <= rollouts.concurrency (${c.rollouts.concurrency})` });
  });

export type RunConfig = z.infer<typeof runConfigSchema>;

export class RunConfigError extends Error {
  override name = 'RunConfigError';
}

/** Parses a run config (a JSON value), listing every problem at once. */
export function parseRunConfig(input: unknown): RunConfig {
  const r = runConfigSchema.safeParse(input ?? {});
  if (!r.success) {
    const lines = r.error.issues.map((i) => `  ${i.path.join('.') || '(root)'}: ${i.message}`);
    throw new RunConfigError(`invalid run config:\n${lines.join('\n')}`);
  }
  return r.data;
}

/** argv (--config FILE) + environment overrides -> a validated RunConfig. */
export function loadRunConfig(argv: readonly string[], env: NodeJS.ProcessEnv): RunConfig {
  let raw: Record<string, unknown> = {};
  const at = argv.indexOf('--config');
  if (at >= 0) {
    const file = argv[at + 1];
    if (!file) throw new RunConfigError('--config needs a file path');
    try {
      raw = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
    } catch (e) {
      throw new RunConfigError(`--config ${file}: ${(e as Error).message}`);
    }
  }
  const unknownArgs = argv.filter((a, i) => a.startsWith('--') && a !== '--config' && argv[i - 1] !== '--config');
  if (unknownArgs.length) throw new RunConfigError(`unknown argument(s): ${unknownArgs.join(' ')} (only --config FILE)`);
  const num = (name: string) => {
    const v = env[name];
    if (v === undefined || v === '') return undefined;
    const n = Number(v);
    if (!Number.isFinite(n)) throw new RunConfigError(`${name}=${v} is not a number`);
    return n;
  };
  const seed = num('ANVIL_SEED');
  const steps = num('ANVIL_MAIN_STEPS');
  if (seed !== undefined) raw.seed = seed;
  if (env.ANVIL_DATA_DIR) raw.dataDir = env.ANVIL_DATA_DIR;
  if (steps !== undefined) raw.budget = { ...(raw.budget as object), steps };
  return parseRunConfig(raw);
}

/** loadRunConfig for a command line: a bad config prints every problem and exits 78. */
export function loadRunConfigOrExit(argv: readonly string[], env: NodeJS.ProcessEnv): RunConfig {
  try {
    return loadRunConfig(argv, env);
  } catch (e) {
    if (e instanceof RunConfigError) {
      console.error(e.message);
      process.exit(78);
    }
    throw e;
  }
}

/** The chain-add environment config a run asks for. */
export function chainAddConfigOf(cfg: RunConfig) {
  return { k: { min: cfg.task.kMin, max: cfg.task.kMax }, maxOperand: cfg.task.maxOperand, prompt: cfg.task.prompt };
}
