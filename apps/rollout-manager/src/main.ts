import { launchService } from '@anvil/observability';
import { rolloutManagerEnv } from './config';

// Config is validated and OpenTelemetry started before './start' (and with it Nest, pg and
// kafkajs) is loaded.
launchService({ service: 'rollout-manager', envSchema: rolloutManagerEnv, load: () => import('./start') });
