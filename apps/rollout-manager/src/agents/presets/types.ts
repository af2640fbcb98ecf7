/**
 * A harness preset: a third-party coding agent a task set names instead of a command
 * (`{"kind": "black-box", "preset": "codex"}`). Each preset is one small file that says where the
 * agent comes from (a registry package at a pinned version, installed into .cache/agents, which
 * a sandbox may read), how a task becomes its invocation (tools/agents/<name>.sh: its offline
 * configuration, the session's base URL and key, the served model, the task's prompt and
 * workspace), and where it leaves its answer and transcript.
 */
import type { ChatMessage } from '../../environments/types';

/** The workspace directory tools/agents/preset.sh makes the agent's HOME (its config, state and transcripts). */
export const PRESET_HOME = '.agent';

export const PRESET_NAMES = ['mini-swe-agent', 'codex', 'claude-code', 'qwen-code', 'openai-agents', 'llm'] as const;
export type PresetName = (typeof PRESET_NAMES)[number];

/** Where an agent comes from: an npm package (its bin), or a PyPI package in a venv of its own on /usr/bin/python3. */
export type InstallSource =
  | {
      registry: 'npm';
      package: string;
      version: string;
      /** The executable under node_modules/.bin. */
      bin: string;
    }
  | {
      registry: 'pypi';
      package: string;
      version: string;
      /** The executable under the venv's bin/. */
      bin: string;
      /** Imported once installed, to prove the venv works. */
      module: string;
      /** Files of ours (tools/agents/...) copied into the venv: a driver script on the package. */
      files?: string[];
    };

/** What a preset's invocation is made from, known before the run. */
export interface PresetInvocationContext {
  /** The model name the gateway serves (the rollout manager's). */
  model: string;
  /** The rollout's LLM-call bound (limits.maxSteps or the environment's). */
  maxSteps: number;
  /** The task set's agent.env, passed on (its own knobs: AGENT_COMPACT, AGENT_MAX_REPLY, ...). */
  env: Record<string, string>;
}

/** What a preset read from the workspace its agent left (null: it left none). */
export interface PresetOutput {
  finalAnswer: string | null;
  messages: ChatMessage[] | null;
}

export interface AgentPreset {
  name: PresetName;
  /** One line for `anvil agents list`. */
  summary: string;
  install: InstallSource;
  /** The agent's own variables for a run (the script's knobs); tools/agents/<name>.sh does the rest. */
  env(ctx: PresetInvocationContext): Record<string, string>;
  /**
   * The answer and transcript the agent left in its workspace (under PRESET_HOME; a tree the
   * agent controlled: read with agent-files.ts, never following its links): they replace what the
   * run read from the answer file and stdout (a null answer: it gave none). Null: it left nothing
   * to read, the run's reading stands.
   */
  readOutput?(workspace: string): Promise<PresetOutput | null>;
}
