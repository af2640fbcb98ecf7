import { launchService } from '@anvil/observability';
import { gatewayEnv } from './config';

// Config is validated and OpenTelemetry started before './start' (and with it Nest, pg and
// kafkajs) is loaded.
launchService({ service: 'gateway', envSchema: gatewayEnv, load: () => import('./start') });
