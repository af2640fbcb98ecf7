export * from './bus';
export * from './memory/memory-bus';
