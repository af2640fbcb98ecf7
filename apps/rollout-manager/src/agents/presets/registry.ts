import { claudeCode } from './claude-code';
import { codex } from './codex';
import { installState } from './install';
import { llm } from './llm';
import { miniSweAgent } from './mini-swe-agent';
import { openaiAgents } from './openai-agents';
import { qwenCode } from './qwen-code';
import { PRESET_NAMES, type AgentPreset, type PresetName } from './types';

/** Every harness preset by name, in the order `anvil agents list` shows them. */
export const PRESETS: Record<PresetName, AgentPreset> = {
  'mini-swe-agent': miniSweAgent,
  codex,
  'claude-code': claudeCode,
  'qwen-code': qwenCode,
  'openai-agents': openaiAgents,
  llm,
};

export const isPresetName = (name: string): name is PresetName => (PRESET_NAMES as readonly string[]).includes(name);

/** Why a run cannot use preset `name` with the agents in `agentsDir` (null: it can), naming what to do. */
export function presetProblem(name: PresetName, agentsDir: string): string | null {
  const p = PRESETS[name];
  const s = installState(p, agentsDir);
  if (s.installed) return null;
  const found = s.version ? `${s.version} is there, ${p.install.version} is pinned` : `not in ${agentsDir}`;
  return `agent preset ${name} (${p.install.package} ${p.install.version}) is not installed (${found}): run \`anvil agents install ${name}\``;
}
