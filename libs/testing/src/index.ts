export * from './service-process';
export * from './scratch-database';
