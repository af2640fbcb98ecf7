export * from './config';
export * from './stats';
export * from './loss';
