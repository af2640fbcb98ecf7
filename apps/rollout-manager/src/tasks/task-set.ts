import { z } from 'zod';
import { MAX_CALLS, MAX_CALLS_PER_SECOND, WEIGHT_SWAP_CHOICES } from '@anvil/contracts';
import { PRESET_NAMES } from '../agents/presets/types';

/** The sandbox backends a task set may name (@anvil/sandbox's kinds). */
export const SANDBOX_KINDS = ['local', 'none'] as const;

/**
 * Resource limits of a sandbox, each per process (rlimits); defaults in sandbox/limits.ts. The
 * wall clock is the rollout's `limits.timeoutMs` and the kept output the agent's `outputCapBytes`.
 */
export const sandboxLimitsSchema = z
  .object({
    /** CPU seconds of one process (default: the rollout's timeout in seconds, one core's worth). */
    cpuSeconds: z.number().int().positive().optional(),
    /** Private writable memory of one process (RLIMIT_DATA). */
    memoryBytes: z.number().int().positive().optional(),
    /** Processes and threads at once, all of the sandbox's together (RLIMIT_NPROC on its own uid). */
    processes: z.number().int().positive().max(1_000_000).optional(),
    /** Largest file it may write. */
    fileSizeBytes: z.number().int().positive().optional(),
    /** Size of its private /tmp and of its $HOME (each). */
    tmpfsBytes: z.number().int().positive().optional(),
    /** stdout + stderr after which it is stopped (default: never; past outputCapBytes output is only counted). */
    outputBytes: z.number().int().positive().optional(),
  })
  .strict();
export type SandboxLimitsSpec = z.infer<typeof sandboxLimitsSchema>;

/** How a rollout's reward is computed (pluggable three ways, plus the environment's own). */
export const verifierSpecSchema = z.discriminatedUnion('kind', [
  /** The built-in environment's programmatic verifier. */
  z.object({ kind: z.literal('env') }),
  /** A TypeScript function registered with the runtime (`verifiers` option) or built in ('final-answer'). */
  z.object({ kind: z.literal('function'), name: z.string().min(1), timeoutMs: z.number().int().positive().default(10_000) }),
  /** An HTTP reward service: POST {task, transcript} → {outcomeReward, success?, processRewards?}. */
  z.object({
    kind: z.literal('http'),
    url: z.string().url(),
    timeoutMs: z.number().int().positive().default(10_000),
    retries: z.number().int().nonnegative().max(10).default(2),
  }),
  /**
   * A command: the verifier input as JSON on stdin; exit code 0 = reward 1 (mode exit-code) or a
   * JSON result on stdout (mode json). It runs in a sandbox of its own (default 'local') whose
   * workspace is the black-box agent's (else an empty one), seeing `readOnlyPaths` (relative to the
   * manager's directory) and nothing else of the host.
   */
  z.object({
    kind: z.literal('command'),
    command: z.array(z.string().min(1)).min(1),
    mode: z.enum(['exit-code', 'json']).default('json'),
    timeoutMs: z.number().int().positive().default(10_000),
    sandbox: z.enum(SANDBOX_KINDS).default('local'),
    readOnlyPaths: z.array(z.string().min(1)).default([]),
  }),
]);
export type VerifierSpec = z.infer<typeof verifierSpecSchema>;

export const agentSpecSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('white-box'), name: z.string().min(1).default('anvil-loop') }),
  z
    .object({
      kind: z.literal('black-box'),
      /** Names the agent in logs and errors (default: its preset's name). */
      name: z.string().min(1).optional(),
      /** argv; `{taskFile}`, `{answerFile}` and `{prompt}` in an argument are replaced by the task file's path, the answer file's and the prompt. */
      command: z.array(z.string().min(1)).min(1).optional(),
      /** A harness preset instead of a command (agents/presets/): a coding agent installed by `anvil agents install`. */
      preset: z.enum(PRESET_NAMES).optional(),
      taskInput: z.enum(['stdin', 'file']).default('stdin'),
      /** The agent's directory, which relative paths (command, readOnlyPaths, a task's workspace) start from; default the manager's. */
      cwd: z.string().optional(),
      /** Extra environment for the agent (never credentials: checked at load). */
      env: z.record(z.string(), z.string()).default({}),
      /** stdout and stderr are each kept up to this many bytes (the rest is counted and dropped). */
      outputCapBytes: z
        .number()
        .int()
        .positive()
        .default(1 << 20),
      /** Where it runs: 'local' (a bubblewrap sandbox, sandbox/README.md) or 'none' (unsandboxed, for trusted agents). */
      sandbox: z.enum(SANDBOX_KINDS).default('local'),
      /** Host paths the agent may read (its install directory, its interpreter's venv), relative to cwd; read-only, at the same path. */
      readOnlyPaths: z.array(z.string().min(1)).default([]),
      /** Resource limits of its sandbox; each absent one has the default of sandbox/limits.ts. */
      sandboxLimits: sandboxLimitsSchema.default({}),
    })
    .refine((a) => (a.command === undefined) !== (a.preset === undefined), {
      message: 'give exactly one of command or preset',
      path: ['command'],
    })
    .refine((a) => a.name !== undefined || a.preset !== undefined, { message: 'an agent with a command needs a name', path: ['name'] }),
]);
export type AgentSpec = z.infer<typeof agentSpecSchema>;

/** The name an agent goes by: its own, else its preset's. */
export function agentName(agent: AgentSpec): string {
  return agent.kind === 'white-box' ? agent.name : (agent.name ?? agent.preset ?? 'black-box');
}

export const contextSpecSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('append_only') }),
  z.object({ kind: z.literal('sliding_window'), lastTurns: z.number().int().positive() }),
  z.object({
    kind: z.literal('summarize'),
    maxTurns: z.number().int().positive(),
    keepLastTurns: z.number().int().nonnegative(),
    summaryMaxTokens: z.number().int().positive().default(64),
  }),
]);
export type ContextSpec = z.infer<typeof contextSpecSchema>;

export const limitsSchema = z
  .object({
    /** Assistant turns (LLM calls); default: the environment's, else 16. */
    maxSteps: z.number().int().positive().optional(),
    /** Prompt tokens of one call (the gateway's usage count) at or above which the rollout ends as max_context. */
    maxContextTokens: z.number().int().positive().optional(),
    /** Wall clock of one rollout. */
    timeoutMs: z.number().int().positive().default(600_000),
    /** Environment failures (tool, verifier, agent start) retried before env_error. */
    maxEnvRetries: z.number().int().nonnegative().max(10).default(2),
    /**
     * The rollout's call budget, enforced by the gateway on its session: LLM calls answered at most
     * (each choice of an n > 1 request counts); past it the rollout ends as max_steps. Default:
     * 4 x maxSteps, at least 256 (see defaultCallBudget).
     */
    maxCalls: z.number().int().positive().max(MAX_CALLS).optional(),
    /** The rollout's rate limit at the gateway: calls per second (a token bucket; over it, 429 with Retry-After). Default: none. */
    callsPerSecond: z.number().positive().max(MAX_CALLS_PER_SECOND).optional(),
    /** Calls the rate limit lets through back to back (the bucket's size). Default: one second's worth, at least 1; needs callsPerSecond. */
    burst: z.number().int().positive().max(MAX_CALLS).optional(),
  })
  .refine((l) => l.burst === undefined || l.callsPerSecond !== undefined, {
    message: "burst needs callsPerSecond (it is the size of the rate limit's bucket)",
    path: ['burst'],
  });
export type RolloutLimits = z.infer<typeof limitsSchema>;

/** A task set's declaration, stored as task_sets.config. */
export const taskSetSpecSchema = z.object({
  id: z.string().min(1).max(128),
  name: z.string().min(1).default('tasks'),
  /** Built-in environment serving tools and the default verifier, or null. */
  env: z.string().min(1).nullable().default(null),
  envConfig: z.record(z.string(), z.unknown()).default({}),
  agent: agentSpecSchema.default({ kind: 'white-box', name: 'anvil-loop' }),
  context: contextSpecSchema.default({ kind: 'append_only' }),
  /** Default verifier of tasks that name none. */
  verifier: verifierSpecSchema.optional(),
  groupSize: z.number().int().positive().max(1024).optional(),
  limits: limitsSchema.default({ timeoutMs: 600_000, maxEnvRetries: 2 }),
  sampling: z
    .object({ temperature: z.number().min(0).max(5).default(1), maxTokens: z.number().int().positive().default(64) })
    .default({ temperature: 1, maxTokens: 64 }),
  /** Tools of the white-box loop beyond the environment's: memory (key-value) and delegate (sub-agent). */
  builtinTools: z.array(z.enum(['memory', 'delegate'])).default([]),
  /**
   * Partial rollouts: what a weight update does to this task set's running generations (its
   * sessions' choice, forwarded to the inference-proxy): 'finish' on the weights they started
   * with, or 'abort-and-resume' under the new ones (a call's tokens then carry two versions).
   * Either way the rollout continues; absent: the inference-proxy's WEIGHT_SWAP_POLICY.
   */
  weightSwap: z.enum(WEIGHT_SWAP_CHOICES).optional(),
});
export type TaskSetSpec = z.infer<typeof taskSetSpecSchema>;
export type TaskSetSpecInput = z.input<typeof taskSetSpecSchema>;

const messageSchema = z
  .object({
    role: z.enum(['system', 'user', 'assistant', 'tool']),
    content: z.string().nullable(),
    tool_calls: z
      .array(z.object({ id: z.string(), type: z.literal('function'), function: z.object({ name: z.string(), arguments: z.string() }) }))
      .optional(),
    tool_call_id: z.string().optional(),
  })
  .strict();

const toolSchema = z.object({
  type: z.literal('function'),
  function: z.object({
    name: z.string().min(1).max(64),
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
  }),
});

/** One JSONL line. `prompt` is shorthand for a single user message. */
export const taskLineSchema = z
  .object({
    id: z.string().min(1).max(128),
    messages: z.array(messageSchema).min(1).optional(),
    prompt: z.string().min(1).optional(),
    system: z.string().optional(),
    tools: z.array(toolSchema).default([]),
    verifier: verifierSpecSchema.optional(),
    split: z.enum(['train', 'eval']).optional(),
    difficulty: z.number().finite().optional(),
    data: z.record(z.string(), z.unknown()).default({}),
    metadata: z.record(z.string(), z.unknown()).default({}),
    /** Black-box agents: a directory (absolute, or relative to the agent's cwd) copied into the rollout's workspace first (a repository snapshot). */
    workspace: z.string().min(1).optional(),
    /** Black-box agents: a command run first in the agent's sandbox, on the same wall clock (installing the snapshot's dependencies). */
    setup: z.array(z.string().min(1)).min(1).optional(),
  })
  .refine((t) => (t.messages === undefined) !== (t.prompt === undefined), {
    message: 'exactly one of messages or prompt is required',
    path: ['messages'],
  });
export type TaskLine = z.infer<typeof taskLineSchema>;
