export * from './load-config';
export * from './fields';
export * from './node-flags';
