export * from './staleness';
