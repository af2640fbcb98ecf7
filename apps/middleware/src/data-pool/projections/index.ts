export { EventStore, firstPerRollout } from './event-store';
export { DataPoolStore } from './data-pool-store';
export { TaskStore, type TaskDefinition, type TaskSetDefinition } from './task-store';
export { UnknownRolloutError } from './errors';
