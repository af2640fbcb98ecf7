export * from './packing';
export * from './advantages';
export * from './losses';
export * from './filters';
export * from './context';
export * from './random';
export * from './staleness';
export * from './scheduling';
