export * from './types';
export * from './tool-delay';
export {
  ADD_TOOL,
  CHAIN_ADD_DEFAULTS,
  CHAIN_ADD_SYSTEM,
  ChainAddConfigError,
  ChainAddEnvironment,
  chainAddConfig,
  chainAddDemonstration,
  chainAddTask,
  executeAdd,
  lastAnswer,
  parseAnswer,
  verifyChainAdd,
  type ChainAddConfig,
  type ChainAddData,
} from './chain-add';
export {
  LongHorizonEnvironment,
  longHorizonTask,
  longHorizonDemonstration,
  verifyLongHorizon,
  LONG_HORIZON_SYSTEM,
  type LongHorizonConfig,
} from './long-horizon';
export { BUILTIN_ENVIRONMENTS, type EnvironmentFactory } from './registry';
