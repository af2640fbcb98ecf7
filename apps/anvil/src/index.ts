/**
 * The anvil application's public entry point (`@anvil/cli`): what benches and tests may use of
 * the run configuration, the one run driver and its two adapters. The command line itself is
 * src/main.ts (bin/anvil.cjs).
 */
export { parseRunConfig, loadRunConfig, runConfigSchema, trainPass, type RunConfig } from './config/run-config';
export { checkRunConfig } from './config/run-files';
export {
  APPS,
  knobEnvs,
  serviceEnv,
  serviceSettings,
  type App,
  type RunInfrastructure,
  type RunModel,
  type RunWiring,
} from './config/service-settings';
export { driveRun, type RunDriverOptions, type RunDriverResult } from './run/driver';
export { trainRun } from './run/train-run';
export type { CompletedRollout, RunServices } from './run/services';
export { startInProcessServices, type InProcessServices } from './run/in-process/in-process-services';
export { startingModel } from './run/starting-model';
export { taskSetOf } from './run/task-set';
