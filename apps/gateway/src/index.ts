/**
 * The gateway's public entry point (`@anvil/gateway`): what hosts (the `anvil` CLI's in-process
 * run, tests, benches) may use. Everything else under src/ is the service's own.
 */
export { GatewayModule } from './app.module';
export { GatewayApiModule } from './gateway-api.module';
export { gatewayEnv, type GatewayConfig } from './config';
export { vocabularyMismatch, VocabularyMismatchError } from './models/inference-proxy-probe';
