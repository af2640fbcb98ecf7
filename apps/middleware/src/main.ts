import { launchService } from '@anvil/observability';
import { middlewareEnv } from './config';

// Config is validated and OpenTelemetry started before './start' (and with it Nest, pg and
// kafkajs) is loaded.
launchService({ service: 'middleware', envSchema: middlewareEnv, load: () => import('./start') });
