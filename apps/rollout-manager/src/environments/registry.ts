import { ChainAddEnvironment } from './chain-add';
import type { Environment } from './types';

export type EnvironmentFactory = (config: Record<string, unknown>) => Environment;

/** Built-in environments by name; the runtime takes more through its `environments` option. */
export const BUILTIN_ENVIRONMENTS: Record<string, EnvironmentFactory> = {
  'chain-add': (config) => new ChainAddEnvironment(config),
};
