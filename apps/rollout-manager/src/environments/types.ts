/**
 * The environment interface of the rollout manager (DESIGN.md, "Context management as
 * environment dynamics"): an environment generates tasks, opens an episode per rollout that
 * serves its tools (tool execution time is part of the environment), and verifies what the
 * agent did. Pure TypeScript: no Nest, no database, no network, so the trainer's warm start and
 * the benches can import it too.
 */

/** OpenAI chat message, as agents send it to the gateway. */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null;
  /** Assistant only. */
  tool_calls?: ToolCall[];
  /** Tool only. */
  tool_call_id?: string;
}

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; /** JSON text */ arguments: string };
}

export interface ToolSpec {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

export type Split = 'train' | 'eval';

/** One task as a task set holds it (also what is stored as tasks.spec). */
export interface EnvTask {
  id: string;
  /** The environment that serves and verifies it ('chain-add', 'long-horizon', ...), or null for a JSONL task with its own verifier. */
  env: string | null;
  /** The opening messages (system + user). */
  messages: ChatMessage[];
  tools: ToolSpec[];
  split: Split;
  /** The difficulty knob's value for this task (chain-add: k). */
  difficulty: number;
  /** What the verifier needs (chain-add: operands and total). */
  data: Record<string, unknown>;
  metadata?: Record<string, unknown>;
}

/** A parsed tool call as the environment executes it. */
export interface ToolInvocation {
  callIndex: number;
  id: string;
  name: string;
  /** The arguments text as the model wrote it. */
  arguments: string;
}

export interface ToolResult {
  content: string;
}

/** Raised by an environment for a failure of the environment itself (not of the agent): the rollout is retried, then ends as env_error. */
export class EnvironmentError extends Error {
  override readonly name = 'EnvironmentError';
}

/** What a rollout did, as the verifier judges it. */
export interface Transcript {
  /** The whole conversation in order (the agent's own history, not a context manager's view). */
  messages: ChatMessage[];
  /** The final assistant answer (content of the last assistant message without tool calls), or null. */
  finalAnswer: string | null;
}

export interface VerifyResult {
  outcomeReward: number;
  success: boolean;
  /** Per assistant turn (LLM call), in call order. */
  processRewards?: number[];
  detail?: string;
}

export interface EpisodeContext {
  rolloutId: string;
  /** Seeds the episode's own randomness (tool delays). */
  seed: number;
  signal?: AbortSignal;
}

/** What a black-box agent left, for an environment that judges its work rather than its transcript. */
export interface AgentWork {
  /** The agent's workspace after its run (null: it had none). */
  workspace: string | null;
}

/** What an environment that prepared a black-box agent's workspace asks of the agent's run. */
export interface WorkspacePlan {
  /** Where in the workspace the agent works (its cwd): the checkout, apart from the run's own files. */
  workdir: string;
  /** Run first in the agent's sandbox, under its clock (a repository's setup command). */
  setup?: string[];
}

/** One rollout's live environment state. */
export interface Episode {
  executeTool(call: ToolInvocation): Promise<ToolResult>;
  /** Black-box agents: fills the agent's fresh workspace before it starts (a repository checkout in a directory of it). */
  prepareWorkspace?(workspace: string): Promise<WorkspacePlan>;
  close?(): Promise<void> | void;
}

export interface EnvironmentLimits {
  /** Assistant turns (LLM calls) before the rollout ends as max_steps. */
  maxSteps: number;
}

export interface Environment<Config = unknown> {
  readonly name: string;
  readonly config: Config;
  /** The seeded task generator: the same options give the same tasks. */
  generate(opts: { seed: number; count: number; split: Split }): EnvTask[];
  limits(task: EnvTask): EnvironmentLimits;
  reset(task: EnvTask, ctx: EpisodeContext): Episode;
  verify(task: EnvTask, transcript: Transcript): VerifyResult;
  /** Judges what a black-box agent did to its workspace (a coding task's diff); used instead of verify when present. */
  verifyWork?(task: EnvTask, transcript: Transcript, work: AgentWork): Promise<VerifyResult>;
  /** How long verifyWork may take for a task (default: the environment verifier's 10 s). */
  verifyTimeoutMs?(task: EnvTask): number;
  /** Problems of a task that can be known before a run (a snapshot it names that is missing), each naming the task. */
  checkTask?(task: EnvTask): string[];
  /** The ideal message list (opening messages included) for warm-start SFT. */
  demonstration(task: EnvTask): ChatMessage[];
}
