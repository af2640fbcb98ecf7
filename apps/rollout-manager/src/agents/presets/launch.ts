/**
 * A preset's run, as the black-box path takes any agent's (BlackBoxLaunch): the common launcher
 * tools/agents/preset.sh with the preset's name and the prompt, the preset's variables and the
 * task set's agent.env, and read-only paths for the agent's install and its scripts. After the
 * run, what the agent left under its home in the workspace (.agent) is read by the preset.
 */
import { join, resolve } from 'node:path';
import type { BlackBoxLaunch, BlackBoxSpec } from '../black-box-launch';
import { anvilHome } from './home';
import { installPlace, presetBin } from './install';
import { PRESETS } from './registry';
import type { PresetName, PresetOutput } from './types';

export interface PresetLaunchContext {
  /** The base of the agent's own relative paths (its cwd, readOnlyPaths): the manager's directory. */
  repoRoot: string;
  agentsDir: string;
  /** The model the gateway serves. */
  model: string;
  maxSteps: number;
}

export function presetLaunch(
  agent: BlackBoxSpec,
  preset: PresetName,
  c: PresetLaunchContext,
): Omit<BlackBoxLaunch, 'workspaceFrom' | 'setup'> {
  const p = PRESETS[preset];
  const scripts = join(anvilHome(), 'tools', 'agents');
  return {
    name: agent.name ?? preset,
    argv: ['sh', join(scripts, 'preset.sh'), preset, '{prompt}'],
    env: { ...p.env({ model: c.model, maxSteps: c.maxSteps, env: agent.env }), AGENT_BIN: presetBin(p, c.agentsDir), ...agent.env },
    cwd: c.repoRoot,
    readOnlyPaths: [scripts, installPlace(p, c.agentsDir), ...agent.readOnlyPaths.map((r) => resolve(c.repoRoot, agent.cwd ?? '.', r))],
    sandbox: agent.sandbox,
    limits: agent.sandboxLimits,
    outputCapBytes: agent.outputCapBytes,
    taskInput: 'file',
  };
}

/** The answer and transcript a preset's agent left in `workspace` (null: nothing beyond the answer file and stdout). */
export async function readPresetOutput(preset: PresetName, workspace: string): Promise<PresetOutput | null> {
  const read = PRESETS[preset].readOutput;
  return read ? read(workspace) : null;
}
