/**
 * The middleware's (the Data Pool's) public entry point (`@anvil/middleware`): what hosts (the
 * `anvil` CLI's in-process run, tests, benches) may use. Everything else under src/ is the
 * service's own.
 */
export { MiddlewareModule } from './app.module';
export { middlewareEnv, dataPoolOptionsOf, type MiddlewareConfig } from './config';
export { DataPoolRuntime, type DataPoolRuntimeOptions } from './runtime';
export { DataPoolIngestion } from './data-pool/ingestion';
