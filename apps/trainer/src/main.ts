import { launchService } from '@anvil/observability';
import { trainerEnv } from './config';

// Config is validated and OpenTelemetry started before './start' (and with it Nest, pg and
// kafkajs) is loaded.
launchService({ service: 'trainer', envSchema: trainerEnv, load: () => import('./start') });
