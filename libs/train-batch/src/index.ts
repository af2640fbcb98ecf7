export * from './reader';
export * from './tree-builder';
export type { PrefixTree, PrefixTreeSample } from '@anvil/contracts';
