import { launchService } from '@anvil/observability';
import { inferenceProxyEnv } from './config';

// Config is validated and OpenTelemetry started before './start' (and with it Nest, pg and
// kafkajs) is loaded.
launchService({ service: 'inference-proxy', envSchema: inferenceProxyEnv, load: () => import('./start') });
