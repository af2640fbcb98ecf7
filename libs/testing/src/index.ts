export * from './service-process';
