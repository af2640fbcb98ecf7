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
