export * from './packing';
export * from './random';
