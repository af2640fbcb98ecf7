export * from './trie';
export * from './budget';
export * from './tree';
