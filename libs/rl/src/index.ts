export * from './packing';
