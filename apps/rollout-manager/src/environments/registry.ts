import { ChainAddEnvironment } from './chain-add';
import { LongHorizonEnvironment } from './long-horizon';
import { RepoFixEnvironment } from './repo-fix';
import type { Environment } from './types';

export type EnvironmentFactory = (config: Record<string, unknown>) => Environment;

/** Built-in environments by name; the runtime takes more through its `environments` option. */
export const BUILTIN_ENVIRONMENTS: Record<string, EnvironmentFactory> = {
  'chain-add': (config) => new ChainAddEnvironment(config),
  'long-horizon': (config) => new LongHorizonEnvironment(config),
  'repo-fix': (config) => new RepoFixEnvironment(config),
};
