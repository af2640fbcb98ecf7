/**
 * The run configuration: every knob of `anvil train` and `anvil stack up`, validated (an unknown
 * or out-of-range knob is refused, every problem listed at once), with the defaults of the
 * built-in demo. Each knob's `.describe()` text is the documentation source: `anvil config docs`
 * renders docs/configuration.md from this schema, and a test keeps the two equal.
 */
import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import { z } from 'zod';
import { WEIGHT_SWAP_CHOICES } from '@anvil/contracts';
import { LORA_TARGETS } from '@anvil/engine';
import { lossConfig, LossConfigError } from '@anvil/rl';
import { agentSpecSchema, contextSpecSchema, limitsSchema, verifierSpecSchema } from '@anvil/rollout-manager';
import { PUBLISH_FORMATS } from '@anvil/trainer';
import { isKnownModelName } from './known-models';

const positiveInt = () => z.number().int().positive();
const nonNegInt = () => z.number().int().nonnegative();

// The task set's parts a run declares are the rollout-manager's own schemas (its task-set spec),
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
/** chain-add's tool execution time per call (the rollout-manager's tool-delay environment dynamics), bounded to an hour. */
const toolDelaySchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('none') }).strict(),
  z.object({ kind: z.literal('fixed'), ms: ms() }).strict(),
  z.object({ kind: z.literal('pareto'), scaleMs: ms().positive(), alpha: z.number().positive().max(100), capMs: ms().positive() }).strict(),
  z.object({ kind: z.literal('lognormal'), medianMs: ms().positive(), sigma: z.number().min(0).max(10), capMs: ms().positive() }).strict(),
]);

/** Task sets built in (generated from a seed), not files: any other task.set is a path to a task JSONL. */
export const BUILTIN_TASK_SETS: readonly string[] = ['chain-add', 'repo-fix'];

const taskSchema = z
  .object({
    set: z
      .string()
      .min(1)
      .default('chain-add')
      .describe(
        '`chain-add` (the built-in multi-turn tool task), `repo-fix` (the built-in coding tasks for a black-box coding agent: seeded bugs in small Python and JavaScript modules, scored by held-back tests; its knobs in task.envConfig, docs/repo-fix.md) or a path to a task JSONL',
      ),
    kMin: z.number().int().min(2).max(8).default(2).describe('chain-add: fewest operands per task (the difficulty knob)'),
    kMax: z.number().int().min(2).max(8).default(3).describe('chain-add: most operands per task (>= kMin)'),
    maxOperand: z.number().int().min(1).max(100_000).default(9).describe('chain-add: largest operand'),
    prompt: z
      .enum(['compact', 'full'])
      .default('compact')
      .describe("chain-add: `compact` (no system message, the tool by name) or `full` (an instruction and the tool's JSON schema)"),
    evalTasks: positiveInt()
      .max(10_000)
      .default(100)
      .describe('held-out tasks per evaluation (for a task JSONL: its first lines of split `eval`)'),
    trainTasks: positiveInt()
      .max(100_000)
      .default(900)
      // Nearly the whole train split of k 2..3 with operands 0..9: a smaller set comes back every few
      // dozen steps and gets memorised (train reward up, held-out success down).
      .describe('chain-add: train-split tasks the RL phase draws its groups from'),
    order: z
      .enum(['shuffled', 'stored'])
      .default('shuffled')
      .describe(
        'order of the train groups, queued a pass over the train split at a time: `shuffled` (a new permutation per pass, from the run seed) or `stored` (task id order, e.g. a curriculum whose ids sort easy to hard)',
      ),
    toolDelay: toolDelaySchema
      .optional()
      .describe(
        'chain-add: time each tool call takes: `{"kind": "fixed", "ms"}`, `{"kind": "pareto", "scaleMs", "alpha", "capMs"}` or `{"kind": "lognormal", "medianMs", "sigma", "capMs"}` (at most an hour); none by default',
      ),
    agent: strictAgent
      .optional()
      .describe(
        'who runs a rollout: `{"kind": "white-box"}` (the built-in agent loop, the default) or `{"kind": "black-box", "name", "command", "taskInput"?, "cwd"?, "env"?, "outputCapBytes"?, "sandbox"?, "readOnlyPaths"?, "sandboxLimits"?}` (any program, once per rollout). `sandbox`: `local` (the default: bubblewrap namespaces, its own uid; its workspace writable, its `readOnlyPaths` (relative to `cwd`) readable, nothing else of the host visible; only its own gateway session reachable) or `none` (unsandboxed, for trusted agents; logged). `sandboxLimits`: `cpuSeconds` (default the rollout\'s timeout), `memoryBytes` (4 GiB), `processes` (1024), `fileSizeBytes` (1 GiB), `tmpfsBytes` (512 MiB), `outputBytes`, per process. `env` may not name what the manager sets per session (`OPENAI_BASE_URL`, `OPENAI_API_BASE`, `OPENAI_API_KEY`, the `ANTHROPIC_` equivalents, any other OpenAI or Anthropic endpoint, every `ANVIL_*`) nor anything credential-like (`*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*_KEY`, cloud and database settings); everything else, `OPENAI_MODEL` included, is passed)',
      ),
    verifier: strictVerifier
      .optional()
      .describe(
        'the verifier of tasks that name none: `{"kind": "env"}` (the environment\'s), `{"kind": "function", "name": "final-answer"}`, `{"kind": "http", "url"}`, or `{"kind": "command", "command", "mode", "sandbox"?, "readOnlyPaths"?}` (run in its own sandbox, `local` by default, over the agent\'s workspace)',
      ),
    context: strictContext
      .optional()
      .describe(
        'white-box context management: `{"kind": "append_only"}` (default), `{"kind": "sliding_window", "lastTurns"}`, `{"kind": "summarize", "maxTurns", "keepLastTurns", "summaryMaxTokens"?}`',
      ),
    limits: limitsSchema
      .strict()
      .optional()
      .describe(
        "per rollout: `maxSteps` (LLM calls), `maxContextTokens`, `timeoutMs` (default 600 s), `maxEnvRetries` (0-10, default 2); at the gateway, per rollout session: `maxCalls` (the call budget: calls answered at most, each choice counted; past it the agent's calls are refused with 429 and the rollout ends as `max_steps`; default 4 x maxSteps, at least 256), `callsPerSecond` (a rate limit: over it, 429 with Retry-After; default none) and `burst` (calls let through back to back; default one second's worth)",
      ),
    env: z
      .string()
      .min(1)
      .optional()
      .describe('a task JSONL: the built-in environment (`chain-add`, `long-horizon`) that serves its tools and the `env` verifier'),
    envConfig: z
      .record(z.string(), z.unknown())
      .optional()
      .describe(
        "the environment's config (with `task.env`, or for task.set `repo-fix`: `languages`, `levels`, `evalFraction`, `sandbox`, `testTimeoutMs`, `maxSteps`)",
      ),
    builtinTools: z
      .array(z.enum(['memory', 'delegate']))
      .optional()
      .describe("white-box tools beyond the environment's: `memory`, `delegate`"),
    weightSwap: z
      .enum(WEIGHT_SWAP_CHOICES)
      .optional()
      .describe("what a weight update does to running generations: `finish` or `abort-and-resume`; absent: the inference-proxy's default"),
  })
  .strict();

const warmStartSchema = z
  .object({
    enabled: z
      .boolean()
      .optional()
      .describe(
        'build (or reuse) a supervised warm start before RL; absent: yes for the tiny model, no for a model directory (RL starts from its weights as given); needs task.set `chain-add`',
      ),
    steps: nonNegInt().max(100_000).default(1200).describe('supervised steps at most (0 = none); the lr schedule spans them'),
    tasksPerStep: positiveInt().max(4096).default(8).describe('demonstrations per supervised step'),
    lr: z.number().positive().max(1).default(1e-3).describe('peak lr (10-step warm-up, cosine to 10%)'),
    targetPassRate: z
      .number()
      .min(0)
      .max(1)
      .default(0.35)
      .describe('stop once this share of the validation tasks pass at temperature 1 (0 = train every step): the budget is a pass rate'),
    checkEvery: positiveInt().max(100_000).default(25).describe('measure the validation pass rate every N steps ...'),
    // The tiny model's checks before step 450 never reach the target: starting there saves their time
    // (the weights do not depend on when checks run, only the step they stop at).
    checkFrom: nonNegInt().max(100_000).default(450).describe('... from step M on'),
    fineCheckEvery: positiveInt()
      .max(100_000)
      .default(5)
      .describe('once a check reaches fineCheckFrom, check every N steps (the pass rate jumps within a few dozen steps)'),
    fineCheckFrom: z
      .number()
      .min(0)
      .max(1)
      .optional()
      .describe('the pass rate from which checks come every fineCheckEvery steps; absent: half the target'),
    validationTasks: nonNegInt()
      .max(10_000)
      .default(100)
      .describe('train-split tasks held out of the demonstrations to measure the pass rate on (never the eval split)'),
    // Apart from the run seed on purpose: every RL seed starts from the same warm start, as RL seeds
    // in a paper share one SFT checkpoint, and the cached warm start serves them all.
    seed: nonNegInt().default(1).describe("the warm start's own seed (init and data order), shared by every RL seed"),
  })
  .strict();

const rolloutsSchema = z
  .object({
    groupSize: z.number().int().min(2).max(256).default(8).describe('G: samples per task (a rollout group)'),
    concurrency: positiveInt().max(4096).default(64).describe('N: rollouts in flight at once (>= G)'),
    eta: nonNegInt().max(64).default(2).describe('η: staleness bound in policy versions (0 = on-policy)'),
    temperature: z.number().min(0).max(5).default(1).describe('sampling temperature of train rollouts'),
    maxTokensPerCall: positiveInt().max(32_768).default(64).describe('max tokens per white-box LLM call'),
  })
  .strict();

const schedulerSchema = z
  .object({
    groupsPerBatch: positiveInt().max(1024).default(8).describe('B: groups per train batch'),
    // A fixed 0.3 N (DESIGN.md's default) lets one straggling group at the head of the queue hold every
    // finished group behind it on heavy-tailed workloads; the adaptive window widens only while the
    // trainer waits (docs/benchmarks.md, "e2e").
    window: z
      .union([positiveInt(), z.literal('adaptive')])
      .default('adaptive')
      .describe(
        'Windowed-FIFO W in rollouts (<= N), or `adaptive`: base round(0.2 N), widened up to N only while the trainer waits (DESIGN.md: round(0.3 N))',
      ),
    dropZeroVariance: z.boolean().default(true).describe('drop groups whose rewards are all equal (they carry no signal)'),
  })
  .strict();

const algorithmSchema = z
  .object({
    loss: z
      .enum(['cispo', 'ppo', 'decoupled_ppo', 'reinforce_tis'])
      .default('cispo')
      .describe("`cispo`, `ppo` (GRPO's PPO-clip), `decoupled_ppo`, `reinforce_tis`"),
    epsLow: z
      .number()
      .min(0)
      .max(1)
      .optional()
      .describe('ratio clip, low side; absent: CISPO 1, PPO 0.2 (CISPO clips to [1 − epsLow, 1 + epsHigh])'),
    epsHigh: z.number().min(0).max(100).optional().describe('ratio clip, high side; absent: CISPO 4, PPO 0.28'),
    // Several AdamW steps per batch put most trained tokens many optimizer steps off the policy that
    // sampled them; unmasked CISPO keeps pushing tokens whose ratio already left the band.
    cispoMask: z
      .union([
        z.object({ epsLow: z.number().min(0).max(1).optional(), epsHigh: z.number().min(0).max(100).optional() }).strict(),
        z.literal(false),
      ])
      .optional()
      .describe(
        'CISPO only: MiniMax-M1\'s token mask `{ "epsLow", "epsHigh" }` (`{}` = 0.2 / 0.28): no gradient for a token whose ratio left that band in its advantage\'s direction; `false`: every token keeps a gradient. Absent: `{}` with miniBatches > 1, else `false`',
      ),
    dualClip: z
      .union([z.number().gt(1).max(1e6), z.literal(false)])
      .optional()
      .describe(
        'PPO kinds only: dual-clip c (verl, SkyRL): a token with a negative advantage whose ratio passed c gets no gradient; `false`: plain PPO-clip. Absent: 3 for `ppo` and `decoupled_ppo`',
      ),
    aggregation: z
      .enum(['token_mean', 'trajectory', 'group', 'seq_mean_token_mean', 'constant'])
      .default('token_mean')
      .describe('how token losses are summed: `token_mean`, `trajectory`, `group`, `seq_mean_token_mean`, `constant`'),
    constantNormalizer: z
      .number()
      .positive()
      .max(1e12)
      .optional()
      .describe('with aggregation `constant` (required there): the loss is divided by it (Dr. GRPO: max tokens × samples)'),
    tokenTisCap: z
      .number()
      .positive()
      .max(1e6)
      .optional()
      .describe('truncated importance sampling against the train/inference mismatch, per-token ratio cap (not with CISPO)'),
    seqTisCap: z.number().positive().max(1e6).optional().describe('the same, per-sequence ratio cap'),
    advantage: z.enum(['grpo', 'dr_grpo', 'rloo', 'reinforce_pp']).default('grpo').describe('`grpo`, `dr_grpo`, `rloo`, `reinforce_pp`'),
    processRewardWeight: z
      .number()
      .min(0)
      .max(100)
      .default(1)
      .describe("λ: a call's advantage = its rollout's + λ × its normalised process reward (0 = outcome only)"),
    lr: z.number().positive().max(1).default(1e-4).describe('AdamW peak learning rate'),
    warmupSteps: nonNegInt()
      .max(100_000)
      .default(20)
      .describe("linear lr warm-up over this many optimizer steps (a fresh AdamW's first steps move every weight by ±lr)"),
    lrSchedule: z
      .enum(['constant', 'cosine'])
      .default('constant')
      .describe('`cosine`: after the warm-up, decay to minLrFactor × lr at the end of the step budget; `constant`: stay at lr'),
    minLrFactor: z.number().min(0).max(1).default(0.1).describe("the cosine's floor, a share of lr"),
    maxGradNorm: z.number().min(0).default(1).describe('gradient clipping by global norm (0 = none)'),
    // The tiny model's trainer waits for batches about half the time, so more, smaller steps per batch
    // cost almost no wall clock and learn more from each rollout (docs/results.md).
    miniBatches: positiveInt()
      .max(64)
      .optional()
      .describe(
        'AdamW steps per train batch (the batch split along group boundaries); absent: 8 for the tiny model, 1 for a model directory',
      ),
    beta1: z.number().min(0).lt(1).default(0.9).describe('AdamW β1'),
    beta2: z.number().min(0).lt(1).default(0.95).describe('AdamW β2'),
    // The tiny model's byte vocabulary has LM-head rows with gradients of 1e-7 or less (bytes only the
    // tool-call format uses): eps 1e-15 lets AdamW scale them up to full-size steps that break the format.
    eps: z
      .number()
      .min(0)
      .max(1)
      .optional()
      .describe("AdamW eps; absent: 1e-6 for the tiny model, 1e-15 (MiniMax-M1's) for a model directory"),
    weightDecay: z.number().min(0).max(1).optional().describe('AdamW decoupled weight decay (absent: 0)'),
    packTokens: positiveInt()
      .max(16_777_216)
      .optional()
      .describe("tokens per packed forward/backward (absent: 65,536); fewer bound a large-vocabulary model's memory"),
    // On the tiny model one policy-gradient step sometimes drops a token of the tool-call format by
    // several nats; the penalty pulls it back within a step (docs/results.md, "Why a KL penalty").
    klCoef: z
      .number()
      .min(0)
      .max(100)
      .optional()
      .describe(
        'β of a KL penalty (k3 on the sampled tokens) to the starting weights, which the trainer then also holds; absent: 0.05 for the tiny model, 0 for a model directory',
      ),
    lora: z
      .object({
        rank: positiveInt().max(65_536),
        alpha: z.number().positive().max(1e6),
        dropout: z.number().min(0).lt(1).optional(),
        targets: z.array(z.enum(LORA_TARGETS)).min(1).optional(),
      })
      .strict()
      .optional()
      .describe(
        `LoRA: \`{ "rank", "alpha", "dropout"?, "targets"? }\`, rank-r adapters (scaled by alpha / rank, dropout on their input while training, default 0) on \`targets\` of every layer (${LORA_TARGETS.map((t) => `\`${t}\``).join(', ')}; default all), the starting weights frozen: AdamW state for the adapters only; the rank must fit every targeted projection of the model. Absent: full fine-tuning`,
      ),
    publish: z
      .enum(PUBLISH_FORMATS)
      .default('merged')
      .describe(
        'with `lora`, what each published version holds: `merged` (the whole model, the adapters merged in) or `adapter` (the PEFT adapter alone, which the inference-proxy applies to its copy of the starting weights)',
      ),
  })
  .strict();

const budgetSchema = z
  .object({
    steps: positiveInt().max(1_000_000).default(120).describe('train batches of RL (each algorithm.miniBatches optimizer steps)'),
    seconds: nonNegInt().default(0).describe('wall-clock cap on the RL phase in seconds (0 = none)'),
    stallSeconds: nonNegInt()
      .default(180)
      .describe('end RL when no train batch came for this long, evaluations aside (0 = wait forever); the run then exits 3 and says why'),
  })
  .strict();

const evalSchema = z
  .object({
    everyVersions: positiveInt().default(60).describe('evaluate held-out tasks every K policy versions (and before step 1 and at the end)'),
    temperature: z.number().min(0).max(5).default(1).describe('sampling temperature of evaluations'),
    samplesPerTask: positiveInt()
      .max(64)
      .default(4)
      .describe('rollouts per held-out task; every evaluation draws the same sampler seeds, so versions are compared on paired samples'),
  })
  .strict();

export const runConfigSchema = z
  .object({
    seed: nonNegInt().default(1).describe('seeds the RL phase: task sampling, the sampler, group order'),
    dataDir: z.string().min(1).default('.anvil').describe('caches, runs (database, checkpoints, logs) and reports'),
    model: z
      .string()
      .min(1)
      .default('tiny')
      .describe(
        '`tiny` (the built-in Llama-family model, 272-token byte vocabulary), a known model by name (`anvil model list`: `smollm2-135m`; fetched into <dataDir>/models on first use), or a Hugging Face model directory (Llama or Qwen2)',
      ),
    servedModelName: z
      .string()
      .min(1)
      .max(128)
      .optional()
      .describe("the model name the gateway serves (what agents' requests name); absent: `anvil-tiny`, or the model directory's name"),
    engineThreads: positiveInt().default(1).describe('engine threads per engine call (generation and training run side by side)'),
    task: taskSchema.prefault({}).describe('the tasks, the agent that runs them and the verifier that scores them'),
    warmStart: warmStartSchema.prefault({}).describe('supervised fine-tuning on the built-in task before RL'),
    rollouts: rolloutsSchema.prefault({}).describe('rollout groups and sampling'),
    scheduler: schedulerSchema.prefault({}).describe("the Data Pool's batches"),
    algorithm: algorithmSchema.prefault({}).describe('advantages, loss and optimizer'),
    budget: budgetSchema.prefault({}).describe('when RL ends'),
    eval: evalSchema.prefault({}).describe('held-out evaluations, each pinned to one policy version'),
    checkpointEvery: positiveInt().default(30).describe('full checkpoint (weights, AdamW state, data position) every N batches'),
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
    if (c.algorithm.publish === 'adapter' && c.algorithm.lora === undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['algorithm', 'publish'],
        message: "'adapter' needs algorithm.lora (full fine-tuning publishes whole models)",
      });
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
    const repoFix = c.task.set === 'repo-fix';
    if (repoFix && c.task.env !== undefined)
      ctx.addIssue({ code: 'custom', path: ['task', 'env'], message: "is for a task JSONL (task.set 'repo-fix' is its own environment)" });
    if (repoFix && c.task.agent?.kind !== 'black-box')
      ctx.addIssue({
        code: 'custom',
        path: ['task', 'agent'],
        message: 'task.set \'repo-fix\' is for a black-box coding agent: give one, e.g. {"kind": "black-box", "preset": "mini-swe-agent"}',
      });
    if (c.warmStart.enabled === true && !builtin)
      ctx.addIssue({
        code: 'custom',
        path: ['warmStart', 'enabled'],
        message: "needs task.set 'chain-add' (the warm start trains on its demonstrations)",
      });
    if (builtin && c.task.env !== undefined)
      ctx.addIssue({ code: 'custom', path: ['task', 'env'], message: "is for a task JSONL (task.set 'chain-add' is its own environment)" });
    if (c.task.envConfig !== undefined && c.task.env === undefined && !repoFix)
      ctx.addIssue({ code: 'custom', path: ['task', 'envConfig'], message: "needs task.env (or task.set 'repo-fix')" });
    if (!builtin && c.task.toolDelay !== undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['task', 'toolDelay'],
        message: "is chain-add's (a JSONL's environment takes it in task.envConfig)",
      });
    if (!builtin && !repoFix && c.task.env === undefined && c.task.verifier?.kind === 'env')
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

/** Where a run configuration comes from: a file (optional) and the environment's overrides. */
export interface RunConfigSource {
  /** --config FILE. */
  file?: string;
  env: NodeJS.ProcessEnv;
}

/** A validated RunConfig from a file and the environment's overrides. */
export function loadRunConfig(src: RunConfigSource): RunConfig {
  return parseRunConfig(runConfigInput(src));
}

/**
 * The raw run config of a file plus the environment's overrides (ANVIL_SEED, ANVIL_MAIN_STEPS,
 * ANVIL_DATA_DIR), before validation: a run's files are checked even when a knob is refused, so
 * every problem is listed at once. A model directory, a task JSONL and an agent's cwd given as
 * relative paths are taken relative to the config file.
 */
export function runConfigInput({ file, env }: RunConfigSource): Record<string, unknown> {
  let raw: Record<string, unknown> = {};
  if (file !== undefined) {
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
    // A known model's name (`anvil model list`) is no path.
    if (raw.model !== undefined && !(typeof raw.model === 'string' && isKnownModelName(raw.model))) raw.model = rel(raw.model, 'tiny');
    const task = raw.task as Record<string, unknown> | undefined;
    if (task && typeof task === 'object') {
      const agent = task.agent as Record<string, unknown> | undefined;
      raw.task = {
        ...task,
        ...(task.set !== undefined ? { set: BUILTIN_TASK_SETS.includes(task.set as string) ? task.set : rel(task.set, '') } : {}),
        ...(agent && typeof agent === 'object' && agent.cwd !== undefined ? { agent: { ...agent, cwd: rel(agent.cwd, '') } } : {}),
      };
    }
  }
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
