export { PRESET_HOME, PRESET_NAMES, type AgentPreset, type InstallSource, type PresetName, type PresetOutput } from './types';
export { PRESETS, isPresetName, presetProblem } from './registry';
export {
  AGENTS_PYTHON,
  PresetInstallError,
  defaultAgentsDir,
  installPlace,
  installPreset,
  installState,
  presetBin,
  type InstallState,
} from './install';
export { presetLaunch, readPresetOutput, type PresetLaunchContext } from './launch';
