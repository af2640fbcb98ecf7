export * from './trie';
export * from './budget';
