export { EventStore } from './event-store';
export { firstPerRollout } from './rollout-rows';
export { DataPoolStore } from './data-pool-store';
export { TaskStore, type TaskDefinition, type TaskSetDefinition } from './task-store';
export { UnknownRolloutError } from './errors';
