import { InitialSchema1795987110915 } from './1795987110915-initial-schema';
import { GatewaySessions1796100000000 } from './1796100000000-gateway-sessions';
import { GatewayCallDeltas1796200000000 } from './1796200000000-gateway-call-deltas';
import { GatewayOutbox1796300000000 } from './1796300000000-gateway-outbox';
import { EventOutbox1796400000000 } from './1796400000000-event-outbox';
import { DataPool1796500000000 } from './1796500000000-data-pool';
import { DataPoolCallAdvantages1796500000100 } from './1796500000100-data-pool-call-advantages';
import { RolloutManagerState1796600000000 } from './1796600000000-rollout-manager-state';
import { RolloutManagerAgentPid1796600000100 } from './1796600000100-rollout-manager-agent-pid';
import { RolloutManagerQueueSequence1796600000200 } from './1796600000200-rollout-manager-queue-sequence';
import { DataPoolSettledAt1796700000000 } from './1796700000000-data-pool-settled-at';
import { GatewaySessionWeightSwap1796800000000 } from './1796800000000-gateway-session-weight-swap';
import { GatewayResponses1796900000000 } from './1796900000000-gateway-responses';
import { GatewaySessionCallLimits1797000000500 } from './1797000000500-gateway-session-call-limits';

/** Every migration, in order, registered explicitly (no globs: works from src and dist alike). */
export const MIGRATIONS = [
  InitialSchema1795987110915,
  GatewaySessions1796100000000,
  GatewayCallDeltas1796200000000,
  GatewayOutbox1796300000000,
  EventOutbox1796400000000,
  DataPool1796500000000,
  DataPoolCallAdvantages1796500000100,
  RolloutManagerState1796600000000,
  RolloutManagerAgentPid1796600000100,
  RolloutManagerQueueSequence1796600000200,
  DataPoolSettledAt1796700000000,
  GatewaySessionWeightSwap1796800000000,
  GatewayResponses1796900000000,
  GatewaySessionCallLimits1797000000500,
];
