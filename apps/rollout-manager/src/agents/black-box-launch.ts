import { resolve } from 'node:path';
import type { StoredTask } from '../tasks/jsonl';
import { agentName, type AgentSpec, type SandboxLimitsSpec } from '../tasks/task-set';
import { defaultAgentsDir } from './presets/install';
import { presetLaunch } from './presets/launch';

export type BlackBoxSpec = Extract<AgentSpec, { kind: 'black-box' }>;

/**
 * Everything one black-box agent run needs, whoever produced it: a task set's own command (below)
 * or a harness preset, which only has to produce one of these. Paths are absolute host paths; a
 * local sandbox shows `readOnlyPaths` read-only at the same paths, and nothing else of the host.
 */
export interface BlackBoxLaunch {
  /** Names the agent in errors and logs. */
  name: string;
  /** `{taskFile}`, `{answerFile}` and `{prompt}` in an argument are replaced at the run. */
  argv: string[];
  /** The agent's own variables (checked: no session, ANVIL_ or credential-like names); the run adds those. */
  env: Record<string, string>;
  /** The agent's directory: where it starts when the sandbox has it (see cwdInside), and the base of its relative paths. */
  cwd: string;
  readOnlyPaths: string[];
  sandbox: BlackBoxSpec['sandbox'];
  limits: SandboxLimitsSpec;
  /** stdout and stderr are each kept up to this many bytes. */
  outputCapBytes: number;
  taskInput: 'stdin' | 'file';
  /** Copied into the fresh workspace before the run (a task's repository snapshot), or null. */
  workspaceFrom: string | null;
  /** Run first in the same sandbox, on the same wall clock, or null. */
  setup: string[] | null;
}

/** What a preset's launch needs of the run (a task set's own command needs none of it). */
export interface LaunchRun {
  /** The model the gateway serves. */
  model: string;
  /** The rollout's LLM-call bound. */
  maxSteps: number;
}

/**
 * A task set's black-box agent for one task: relative paths taken from the agent's cwd (default:
 * the manager's directory). A preset's launch comes from the preset (agents/presets/launch.ts);
 * `run` is what it needs (checks before a run give a placeholder).
 */
export function blackBoxLaunch(
  agent: BlackBoxSpec,
  task: Pick<StoredTask, 'workspace' | 'setup'>,
  repoRoot: string,
  run: LaunchRun = { model: 'anvil-tiny', maxSteps: 16 },
): BlackBoxLaunch {
  const cwd = resolve(repoRoot, agent.cwd ?? '.');
  const fromTask = { workspaceFrom: task.workspace ? resolve(cwd, task.workspace) : null, setup: task.setup ?? null };
  if (agent.preset) return { ...presetLaunch(agent, agent.preset, { repoRoot, agentsDir: defaultAgentsDir(), ...run }), ...fromTask };
  return {
    name: agentName(agent),
    // A black-box agent has a command or a preset (the schema's refinement).
    argv: agent.command ?? [],
    env: agent.env,
    cwd,
    readOnlyPaths: agent.readOnlyPaths.map((p) => resolve(cwd, p)),
    sandbox: agent.sandbox,
    limits: agent.sandboxLimits,
    outputCapBytes: agent.outputCapBytes,
    taskInput: agent.taskInput,
    ...fromTask,
  };
}
