export * from './telemetry';
export * from './logger';
export * from './metrics';
export * from './launch';
