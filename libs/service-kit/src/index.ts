export * from './tokens';
export * from './readiness';
export * from './ops.module';
export * from './ops.controller';
export * from './bootstrap';
export * from './nest-logger';
export * from './infra.module';
export * from './service-modules';
