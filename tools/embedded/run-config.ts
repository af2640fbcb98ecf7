/**
 * The main job's run configuration: every knob, validated (unknown or out-of-range knobs are
 * refused with every problem listed), with the defaults of the embedded demo. A user's own run is
 * a JSON file given with `npm run main -- --config run.json`; a few knobs also come from the
 * environment for quick experiments (ANVIL_SEED, ANVIL_MAIN_STEPS, ANVIL_DATA_DIR).
 */
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import { z } from 'zod';
import { WEIGHT_SWAP_CHOICES } from '@anvil/contracts';
import { lossConfig, LossConfigError } from '@anvil/rl';
import { agentSpecSchema, contextSpecSchema, limitsSchema, verifierSpecSchema } from '@anvil/rollout-manager';

const positiveInt = () => z.number().int().positive();
const nonNegInt = () => z.number().int().nonnegative();

// The task set's parts a user run declares: the rollout-manager's own schemas (its task-set spec),
// made strict so a misspelt field is refused rather than dropped.
const [whiteBoxAgent, blackBoxAgent] = agentSpecSchema.options;
const strictAgent = z.discriminatedUnion('kind', [whiteBoxAgent.strict(), blackBoxAgent.strict()]);
const [envVerifier, functionVerifier, httpVerifier, commandVerifier] = verifierSpecSchema.options;
const strictVerifier = z.discriminatedUnion('kind', [
  envVerifier.strict(),
  functionVerifier.strict(),
  httpVerifier.strict(),
  commandVerifier.strict(),
]);
const [appendOnly, slidingWindow, summarize] = contextSpecSchema.options;
const strictContext = z.discriminatedUnion('kind', [appendOnly.strict(), slidingWindow.strict(), summarize.strict()]);
const ms = () => z.number().min(0).max(3_600_000);
/** chain-add's tool execution time per call (apps/rollout-manager/src/environments/tool-delay.ts), bounded to an hour. */
const toolDelaySchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('none') }).strict(),
  z.object({ kind: z.literal('fixed'), ms: ms() }).strict(),
  z.object({ kind: z.literal('pareto'), scaleMs: ms().positive(), alpha: z.number().positive().max(100), capMs: ms().positive() }).strict(),
  z.object({ kind: z.literal('lognormal'), medianMs: ms().positive(), sigma: z.number().min(0).max(10), capMs: ms().positive() }).strict(),
]);

export const runConfigSchema = z
  .object({
    /** Seeds the RL phase: task sampling, the sampler, group order (the warm start has its own, warmStart.seed). */
    seed: nonNegInt().default(1),
    /** Where caches, checkpoints and reports go. */
    dataDir: z.string().min(1).default('.anvil'),
    /** 'tiny' (the built-in Llama-family model over the byte tokenizer) or a Hugging Face model directory. */
    model: z.string().min(1).default('tiny'),
    /** The name the gateway serves the model under (what a black-box agent's requests must name); absent: 'anvil-tiny' for the tiny model, else the model directory's name. */
    servedModelName: z.string().min(1).max(128).optional(),
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
        /** Held-out tasks per evaluation (a task JSONL: its first evalTasks lines of split eval). */
        evalTasks: positiveInt().max(10_000).default(100),
        /**
         * chain-add: train-split tasks the RL phase draws its groups from. The default takes nearly the
         * whole train split of k 2..3 with operands 0..9 (about 990 tasks): with 400, one seed's train
         * reward kept rising while held-out success fell from 44% to 40% over its last 45 steps (each
         * task came back every ~60 steps and was memorised); with 900 the same seed ended 4 points higher.
         */
        trainTasks: positiveInt().max(100_000).default(900),
        /**
         * The order train groups are queued in, a pass over the train split at a time: 'shuffled' (a
         * new seeded permutation each pass, from the run seed) or 'stored' (task id order; a task
         * JSONL's own order is kept only through task ids that sort as its curriculum). Stored, the
         * built-in set's consecutive batches were neighbours in operand order (every seed the same
         * sequence of easy and hard stretches).
         */
        order: z.enum(['shuffled', 'stored']).default('shuffled'),
        /** chain-add: the time each tool call takes (environment dynamics; absent = none): fixed, pareto or lognormal, capped. */
        toolDelay: toolDelaySchema.optional(),
        /** Who runs a rollout: the built-in white-box loop ({kind: 'white-box'}) or a black-box command ({kind: 'black-box', name, command, ...}); absent: white-box. */
        agent: strictAgent.optional(),
        /** The verifier of tasks that name none: env | function (e.g. 'final-answer') | http | command; absent: the built-in environment's. */
        verifier: strictVerifier.optional(),
        /** White-box context management: append_only (absent), sliding_window, summarize. */
        context: strictContext.optional(),
        /** Per-rollout limits: maxSteps, maxContextTokens, timeoutMs, maxEnvRetries. */
        limits: limitsSchema.strict().optional(),
        /** A task JSONL: the built-in environment ('chain-add', 'long-horizon') that serves its tools and the env verifier, and its config; absent: none. */
        env: z.string().min(1).optional(),
        envConfig: z.record(z.string(), z.unknown()).optional(),
        /** White-box tools beyond the environment's: memory, delegate. */
        builtinTools: z.array(z.enum(['memory', 'delegate'])).optional(),
        /** What a weight update does to running generations: 'finish' or 'abort-and-resume'; absent: the inference-proxy's default. */
        weightSwap: z.enum(WEIGHT_SWAP_CHOICES).optional(),
      })
      .strict()
      .default({
        set: 'chain-add',
        kMin: 2,
        kMax: 3,
        maxOperand: 9,
        prompt: 'compact',
        evalTasks: 100,
        trainTasks: 900,
        order: 'shuffled',
      }),
    warmStart: z
      .object({
        /** Build (or reuse) the warm start before RL; absent: yes for the tiny model, no for a model directory (RL starts from its weights as given). Needs task.set 'chain-add' (its demonstrations). */
        enabled: z.boolean().optional(),
        /** Supervised steps on generated demonstrations at most; the lr schedule spans them (0 = start RL from the model as given). */
        steps: nonNegInt().max(100_000).default(1200),
        tasksPerStep: positiveInt().max(4096).default(8),
        lr: z.number().positive().max(1).default(1e-3),
        /** Stop once this fraction of the validation tasks pass at temperature 1 (0 = train all steps): the warm start's budget is a pass rate. */
        targetPassRate: z.number().min(0).max(1).default(0.35),
        /**
         * Measure the validation pass rate every this many steps, from step checkFrom on. From 450: on
         * the AMD EPYC and the Intel Xeon the warm start was built on, the checks from 200 to 425 scored
         * 1-10% against the 35% target (they cannot stop the run, and cost about 25 s of a first run);
         * the weights do not depend on when checks run, only the step they stop at.
         */
        checkEvery: positiveInt().max(100_000).default(25),
        checkFrom: nonNegInt().max(100_000).default(450),
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
      .default({
        steps: 1200,
        tasksPerStep: 8,
        lr: 1e-3,
        targetPassRate: 0.35,
        checkEvery: 25,
        checkFrom: 450,
        fineCheckEvery: 5,
        validationTasks: 100,
        seed: 1,
      }),
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
        /**
         * Windowed-FIFO window W in rollouts (<= N), or 'adaptive' (the default: base round(0.2 N),
         * widened up to N only while the trainer waits, libs/rl scheduling/adaptive.ts). DESIGN.md's
         * default is round(0.3 N); the run configuration departs from it (2026-12-05) because on the
         * e2e bench's heavy-tailed tool workload a fixed 0.3 N (58 < one 64-rollout batch) lets one
         * straggling group at the head hold every finished group behind it: async 4.22 trajectories/s
         * with it (2.52x sync), 5.39 adaptive (3.17x, seeds 1-3, after the Data Pool's wait fix of
         * 2026-12-05). In the main job (generation-bound, no tool delays) it is a wash: +45.8, +38.5,
         * +43.3 on seeds 1-3 against +35.3 to +48.8 fixed. A number restores a fixed window (the
         * scheduler bench's regimes: adaptive is beyond the fixed-W frontier in two of three, libs/rl README).
         */
        window: z.union([positiveInt(), z.literal('adaptive')]).default('adaptive'),
        dropZeroVariance: z.boolean().default(true),
      })
      .strict()
      .default({ groupsPerBatch: 8, window: 'adaptive', dropZeroVariance: true }),
    algorithm: z
      .object({
        loss: z.enum(['cispo', 'ppo', 'decoupled_ppo', 'reinforce_tis']).default('cispo'),
        epsLow: z.number().min(0).max(1).optional(),
        epsHigh: z.number().min(0).max(100).optional(),
        /**
         * CISPO only: MiniMax-M1's token mask, no gradient for a token whose ratio π_θ/π_behaviour left
         * [1 − epsLow, 1 + epsHigh] in its advantage's direction ({} = 0.2 / 0.28); false = none (M1's
         * CISPO as DESIGN.md has it: every token keeps a gradient). Absent: {} when the run takes
         * several AdamW steps per batch (miniBatches > 1, the tiny model's default), none otherwise.
         * Why (2026-12-04/05, README "npm run bench -- e2e"): with 8 steps a batch and lag 1-2 versions,
         * most trained tokens are 8-16 optimizer steps off the policy that sampled them, and unmasked
         * CISPO keeps pushing tokens whose ratio already left the band: held-out 24.0% at 180 s against
         * GRPO's 28.5%, 28.7% with the mask (fixed W); with the adaptive W 28.8% against 28.7%
         * (2026-12-05). The main job learns as well with it (+45.8, +38.5, +43.3 on seeds 1-3).
         */
        cispoMask: z
          .union([
            z.object({ epsLow: z.number().min(0).max(1).optional(), epsHigh: z.number().min(0).max(100).optional() }).strict(),
            z.literal(false),
          ])
          .optional(),
        /**
         * PPO kinds only: dual-clip c (verl's clip_ratio_c, SkyRL's; Ye et al. 2020): a token with a
         * negative advantage whose ratio passed c gets no gradient instead of one growing with the
         * ratio; false = plain PPO-clip. Absent: 3 for ppo and decoupled_ppo (verl's and SkyRL's default).
         */
        dualClip: z.union([z.number().gt(1).max(1e6), z.literal(false)]).optional(),
        aggregation: z.enum(['token_mean', 'trajectory', 'group', 'seq_mean_token_mean', 'constant']).default('token_mean'),
        /** With aggregation 'constant' (required there): the loss is divided by this (Dr. GRPO: max tokens × samples). */
        constantNormalizer: z.number().positive().max(1e12).optional(),
        /** Truncated importance sampling against the train/inference mismatch: per-token ratio cap, per-sequence ratio cap (absent: off; reinforce_tis turns the token cap on). */
        tokenTisCap: z.number().positive().max(1e6).optional(),
        seqTisCap: z.number().positive().max(1e6).optional(),
        advantage: z.enum(['grpo', 'dr_grpo', 'rloo', 'reinforce_pp']).default('grpo'),
        /** λ of the process-reward rule: a call's advantage = its rollout's + λ · its normalised process reward (0 = outcome only). */
        processRewardWeight: z.number().min(0).max(100).default(1),
        /**
         * Peak AdamW lr, measured with one AdamW step per batch (see miniBatches). 1e-4 constant:
         * +22.3, +21.0 and +21.7 held-out points on seeds 1-3 over 120
         * steps with eps 1e-6 (2026-12-03); +16.3, +19.8 and +15.5 over 90 steps with eps 1e-15 and the
         * 565-step warm start and shuffled train passes (2026-12-02); with passes in task id order +12,
         * +6.5 and +11.5, and +21, +24 and +11 on a 530-step warm start. In task id order, 1.5e-4 with a cosine
         * to 10% gained +24, +22 and +18 on the 530-step warm start but +11.5 and -5.7 (a collapse: train
         * reward 0.31 -> 0.07) on two seed-1 runs from the 565-step one; 2e-4 with the cosine learned
         * garbage tool calls late ('{"a"nargume...').
         */
        lr: z.number().positive().max(1).default(1e-4),
        /** Linear lr warm-up over this many optimizer steps (a fresh AdamW's first steps move every weight by ±lr). */
        warmupSteps: nonNegInt().max(100_000).default(20),
        /** 'cosine': after the warm-up the lr decays to minLrFactor · lr at the end of the step budget; 'constant': it stays at lr. */
        lrSchedule: z.enum(['constant', 'cosine']).default('constant'),
        minLrFactor: z.number().min(0).max(1).default(0.1),
        maxGradNorm: z.number().min(0).default(1),
        /**
         * AdamW steps per train batch (the batch split along group boundaries: with B = 8, one group
         * a step); absent: 8 for the tiny model, 1 for a model directory. The tiny model's trainer
         * waits for batches about half the time, so more, smaller steps per batch cost almost no
         * wall clock (0.75 -> 0.85 s a batch) and learn more from each rollout. Held-out gains over 120
         * batches on seeds 1-3 (2026-12-04, same day, same machine): 1 step +21, +18, +19; 2 steps
         * +26, +17.3, +27; 4 steps +37.5/+37.3, +18.8/+29.8, +31.5/+39.8; 8 steps
         * +42.8/+48.8/+41.3/+45.5, +35.3/+42.0, +38.5/+37.7/+43.8 (README). A model directory keeps
         * the usual one step per batch until it is measured there.
         */
        miniBatches: positiveInt().max(64).optional(),
        beta1: z.number().min(0).lt(1).default(0.9),
        beta2: z.number().min(0).lt(1).default(0.95),
        /**
         * AdamW eps; absent: 1e-6 for the tiny model, 1e-15 (the design's, MiniMax-M1's) for a model
         * directory. The tiny model's byte vocabulary has LM-head rows whose gradients are about 1e-7
         * or less (letters only the tool-call format uses, bytes never sampled): with eps 1e-15 AdamW
         * moved them by steps of the digits' rows' size (gradients 1e-4), a drift that flipped a format
         * token ('"arguments"' -> '"arg"', '"b"' -> '""'): two of nine 120-step runs collapsed and a
         * third lost six steps to it. 1e-6 damps those rows and leaves the rest (median sqrt(v) 2e-5)
         * nearly as they were: +22.3, +21.0 and +21.7 on seeds 1-3 with it (README).
         */
        eps: z.number().min(0).max(1).optional(),
        /** AdamW decoupled weight decay (absent: 0). */
        weightDecay: z.number().min(0).max(1).optional(),
        /** Tokens per packed forward/backward of the trainer (absent: 65,536); a large-vocabulary model may need fewer. */
        packTokens: positiveInt().max(16_777_216).optional(),
        /**
         * β of a KL penalty (k3 on the sampled tokens) to the starting weights, which the trainer then
         * also holds and runs forward (0 = none). Absent: 0.05 for the tiny model, 0 for a model
         * directory (a second copy of a large model's weights is the user's call). On the tiny model a
         * policy-gradient step sometimes drops one token of the tool-call format by several nats
         * (looked at offline: most of the drop came from one step's update of layer 0); with β 0.05 the
         * next steps pull it back, without it the format stays broken (README).
         */
        klCoef: z.number().min(0).max(100).optional(),
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
        beta1: 0.9,
        beta2: 0.95,
      }),
    budget: z
      .object({
        /** Train batches of RL (each algorithm.miniBatches optimizer steps). */
        steps: positiveInt().max(1_000_000).default(120),
        /** Wall-clock cap on the RL phase, seconds (0 = none). */
        seconds: nonNegInt().default(0),
        /** End the RL phase when no train batch came for this many seconds, evaluations aside (0 = wait forever): zero-variance groups are dropped, so a policy that solves every task or none never gets one. */
        stallSeconds: nonNegInt().default(180),
      })
      .strict()
      .default({ steps: 120, seconds: 0, stallSeconds: 180 }),
    eval: z
      .object({
        /** Evaluate held-out tasks every this many policy versions (and before step 1 and at the end). */
        everyVersions: positiveInt().default(60),
        temperature: z.number().min(0).max(5).default(1),
        /**
         * Rollouts per held-out task in each evaluation. Every evaluation draws the same sampler seeds
         * per (task, sample), so two versions are compared on paired samples; more samples per task
         * shrink the noise of each figure (100 tasks x 1 sample at temperature 1: about ±5 points).
         */
        samplesPerTask: positiveInt().max(64).default(4),
      })
      .strict()
      .default({ everyVersions: 60, temperature: 1, samplesPerTask: 4 }),
    /** Full checkpoint (resume point) every this many batches. */
    checkpointEvery: positiveInt().default(30),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.task.kMax < c.task.kMin)
      ctx.addIssue({ code: 'custom', path: ['task', 'kMax'], message: `must be >= task.kMin (${c.task.kMin})` });
    if (c.rollouts.concurrency < c.rollouts.groupSize)
      ctx.addIssue({
        code: 'custom',
        path: ['rollouts', 'concurrency'],
        message: `must be >= rollouts.groupSize (${c.rollouts.groupSize}): a group runs at once`,
      });
    if (typeof c.scheduler.window === 'number' && c.scheduler.window > c.rollouts.concurrency)
      ctx.addIssue({
        code: 'custom',
        path: ['scheduler', 'window'],
        message: `must be <= rollouts.concurrency (${c.rollouts.concurrency})`,
      });
    if (c.algorithm.aggregation === 'constant' && c.algorithm.constantNormalizer === undefined)
      ctx.addIssue({ code: 'custom', path: ['algorithm', 'constantNormalizer'], message: "is required with aggregation 'constant'" });
    if (c.algorithm.constantNormalizer !== undefined && c.algorithm.aggregation !== 'constant')
      ctx.addIssue({ code: 'custom', path: ['algorithm', 'constantNormalizer'], message: "is only used with aggregation 'constant'" });
    try {
      lossConfigOf(c);
    } catch (e) {
      if (!(e instanceof LossConfigError)) throw e;
      // libs/rl names its own fields; the knob is what the user wrote
      const knob: Record<string, string> = { kind: 'loss', 'correction.tokenTis': 'tokenTisCap', 'correction.seqTis': 'seqTisCap' };
      const field = knob[e.field] ?? e.field.split('.')[0];
      ctx.addIssue({ code: 'custom', path: ['algorithm', field], message: e.message });
    }
    const builtin = c.task.set === 'chain-add';
    if (c.warmStart.enabled === true && !builtin)
      ctx.addIssue({
        code: 'custom',
        path: ['warmStart', 'enabled'],
        message: "needs task.set 'chain-add' (the warm start trains on its demonstrations)",
      });
    if (builtin && c.task.env !== undefined)
      ctx.addIssue({ code: 'custom', path: ['task', 'env'], message: "is for a task JSONL (task.set 'chain-add' is its own environment)" });
    if (c.task.envConfig !== undefined && c.task.env === undefined)
      ctx.addIssue({ code: 'custom', path: ['task', 'envConfig'], message: 'needs task.env' });
    if (!builtin && c.task.toolDelay !== undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['task', 'toolDelay'],
        message: "is chain-add's (a JSONL's environment takes it in task.envConfig)",
      });
    if (!builtin && c.task.env === undefined && c.task.verifier?.kind === 'env')
      ctx.addIssue({ code: 'custom', path: ['task', 'verifier'], message: 'kind env needs a built-in environment (task.env)' });
  });

/** The AdamW eps a run uses when it names none (see algorithm.eps). */
export const defaultAdamEps = (model: string): number => (model === 'tiny' ? 1e-6 : 1e-15);

/** The KL penalty's β a run uses when it names none (see algorithm.klCoef). */
export const defaultKlCoef = (model: string): number => (model === 'tiny' ? 0.05 : 0);

/** Optimizer steps per train batch a run uses when it names none (see algorithm.miniBatches). */
export const defaultMiniBatches = (model: string): number => (model === 'tiny' ? 8 : 1);

/** PPO's dual-clip a run uses when it names none (see algorithm.dualClip): the peers' 3 for the PPO kinds. */
export const defaultDualClip = (loss: string): number | undefined => (loss === 'ppo' || loss === 'decoupled_ppo' ? 3 : undefined);
type CispoMaskKnob = { epsLow?: number; epsHigh?: number } | false;
/** CISPO's token mask a run uses when it names none (see algorithm.cispoMask): on with several AdamW steps a batch. */
export const defaultCispoMask = (loss: string, miniBatches: number): CispoMaskKnob | undefined =>
  loss !== 'cispo' ? undefined : miniBatches > 1 ? {} : false;

export type RunConfig = Omit<z.infer<typeof runConfigSchema>, 'algorithm'> & {
  algorithm: z.infer<typeof runConfigSchema>['algorithm'] & { eps: number; klCoef: number; miniBatches: number };
};

export class RunConfigError extends Error {
  override name = 'RunConfigError';
  constructor(
    message: string,
    /** Each problem on its own ('path: what is wrong'). */
    readonly issues: string[] = [message],
  ) {
    super(message);
  }
}

/** The submission of the train split's pass number `pass` (0, 1, ...): in the run's order (task.order), each shuffled pass its own permutation. */
export function trainPass(cfg: RunConfig, taskSetId: string, pass: number): { taskSetId: string; shuffleSeed?: number } {
  return cfg.task.order === 'shuffled' ? { taskSetId, shuffleSeed: (Math.imul(cfg.seed + 1, 0x9e3779b1) + pass) >>> 0 } : { taskSetId };
}

/** Parses a run config (a JSON value), listing every problem at once. */
export function parseRunConfig(input: unknown): RunConfig {
  const r = runConfigSchema.safeParse(input ?? {});
  if (!r.success) {
    const issues = r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`);
    throw new RunConfigError(`invalid run config:\n${issues.map((l) => `  ${l}`).join('\n')}`, issues);
  }
  const a = r.data.algorithm;
  const model = r.data.model;
  const miniBatches = a.miniBatches ?? defaultMiniBatches(model);
  const cispoMask = a.cispoMask ?? defaultCispoMask(a.loss, miniBatches);
  const dualClip = a.dualClip ?? defaultDualClip(a.loss);
  return {
    ...r.data,
    algorithm: {
      ...a,
      eps: a.eps ?? defaultAdamEps(model),
      klCoef: a.klCoef ?? defaultKlCoef(model),
      miniBatches,
      ...(cispoMask !== undefined ? { cispoMask } : {}),
      ...(dualClip !== undefined ? { dualClip } : {}),
    },
  };
}

/** argv (--config FILE) + environment overrides -> a validated RunConfig. */
export function loadRunConfig(argv: readonly string[], env: NodeJS.ProcessEnv): RunConfig {
  return parseRunConfig(runConfigInput(argv, env));
}

/**
 * argv (--config FILE) + environment overrides -> the raw run config, before validation (a user
 * run checks its files even when a knob is refused, so every problem is listed at once). A model
 * directory, a task JSONL and an agent's cwd given as relative paths are taken relative to the
 * config file.
 */
export function runConfigInput(argv: readonly string[], env: NodeJS.ProcessEnv): Record<string, unknown> {
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
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
      throw new RunConfigError(`--config ${file}: must hold a JSON object`);
    const base = dirname(resolve(file));
    const rel = (p: unknown, builtin: string) =>
      typeof p === 'string' && p !== builtin && p !== '' && !isAbsolute(p) ? resolve(base, p) : p;
    if (raw.model !== undefined) raw.model = rel(raw.model, 'tiny');
    const task = raw.task as Record<string, unknown> | undefined;
    if (task && typeof task === 'object') {
      const agent = task.agent as Record<string, unknown> | undefined;
      raw.task = {
        ...task,
        ...(task.set !== undefined ? { set: rel(task.set, 'chain-add') } : {}),
        ...(agent && typeof agent === 'object' && agent.cwd !== undefined ? { agent: { ...agent, cwd: rel(agent.cwd, '') } } : {}),
      };
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
  return raw;
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
  return {
    k: { min: cfg.task.kMin, max: cfg.task.kMax },
    maxOperand: cfg.task.maxOperand,
    prompt: cfg.task.prompt,
    ...(cfg.task.toolDelay ? { toolDelay: cfg.task.toolDelay } : {}),
  };
}

/** The trainer's loss for a run's algorithm knobs (libs/rl validates the combination). */
export function lossConfigOf(
  cfg:
    | Pick<RunConfig, 'algorithm'>
    | { algorithm: Omit<RunConfig['algorithm'], 'eps' | 'klCoef' | 'miniBatches'> & { klCoef?: number; miniBatches?: number } },
) {
  const a = cfg.algorithm;
  const correction = {
    ...(a.tokenTisCap !== undefined ? { tokenTis: { cap: a.tokenTisCap } } : {}),
    ...(a.seqTisCap !== undefined ? { seqTis: { cap: a.seqTisCap } } : {}),
  };
  return lossConfig({
    kind: a.loss,
    aggregation: a.aggregation,
    ...(a.epsLow !== undefined ? { epsLow: a.epsLow } : {}),
    ...(a.epsHigh !== undefined ? { epsHigh: a.epsHigh } : {}),
    ...(a.cispoMask ? { cispoMask: a.cispoMask } : {}),
    ...(a.dualClip ? { dualClip: a.dualClip } : {}),
    ...(a.constantNormalizer !== undefined ? { constantNormalizer: a.constantNormalizer } : {}),
    ...(Object.keys(correction).length ? { correction } : {}),
    ...(a.klCoef ? { klCoef: a.klCoef } : {}),
  });
}
