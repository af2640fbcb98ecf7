/**
 * The rollout-manager's public entry point (`@anvil/rollout-manager`): what hosts (the `anvil`
 * CLI's in-process run and its configuration checks, tests, benches) may use. Everything else
 * under src/ is the service's own.
 */
export { RolloutManagerModule } from './app.module';
export { rolloutManagerEnv, type RolloutManagerConfig } from './config';
export { rolloutRuntimeConfigOf } from './runtime-config';
export { RolloutRuntime, EvaluationError, type RolloutOutcome, type RolloutRuntimeOptions, type AdmissionBlock } from './runtime';
export {
  agentSpecSchema,
  contextSpecSchema,
  limitsSchema,
  sandboxLimitsSchema,
  SANDBOX_KINDS,
  taskSetSpecSchema,
  verifierSpecSchema,
  type AgentSpec,
  type ContextSpec,
  type RolloutLimits,
  type SandboxLimitsSpec,
  type TaskSetSpec,
  type TaskSetSpecInput,
  type VerifierSpec,
} from './tasks/task-set';
export { parseTaskJsonl, TaskFileError, type StoredTask } from './tasks/jsonl';
export type { ChatMessage, EnvTask, Environment, ToolSpec } from './environments/types';
export { BUILTIN_ENVIRONMENTS, type EnvironmentFactory } from './environments/registry';
export { ChainAddEnvironment, chainAddDemonstration, type ChainAddConfig } from './environments/chain-add';
export { BUILTIN_VERIFIERS, type VerifierFn } from './verifiers/verifiers';
export { AgentSpecError, checkAgentEnv } from './agents/black-box';
export { blackBoxLaunch, type BlackBoxLaunch } from './agents/black-box-launch';
export { blackBoxAgentProblems, commandVerifierProblems, taskWorkspaceProblems } from './tasks/sandbox-checks';
export { localSandboxProblem, type SandboxOptions } from './sandbox/sandboxes';
export { SANDBOX_LIMIT_DEFAULTS } from './sandbox/limits';
export {
  PRESETS,
  PRESET_NAMES,
  PresetInstallError,
  defaultAgentsDir,
  installPlace,
  installPreset,
  installState,
  isPresetName,
  presetProblem,
  type AgentPreset,
  type PresetName,
} from './agents/presets';
export { RepoFixEnvironment, repoFixConfigSchema, type RepoFixConfig } from './environments/repo-fix';
