import type { z } from 'zod';
import { TOPICS } from '../topics';
import { llmCallRecordedV1 } from './llm-call';
import { rolloutCompletedV1, rolloutStartedV1 } from './rollout';
import { trajectoryReadyV1 } from './trajectory';
import { trainBatchV1 } from './train-batch';
import { policyVersionActivatedV1, weightsPublishedV1 } from './weights';

/**
 * Every event the design names: its topic, its schema per version, and the version
 * producers write now. Consumers accept every listed version and reject the rest.
 */
export const EVENTS = {
  'llm_call.recorded': { topic: TOPICS.llmCalls, current: 1, versions: { 1: llmCallRecordedV1 } },
  'rollout.started': { topic: TOPICS.rollouts, current: 1, versions: { 1: rolloutStartedV1 } },
  'rollout.completed': { topic: TOPICS.rollouts, current: 1, versions: { 1: rolloutCompletedV1 } },
  'trajectory.ready': { topic: TOPICS.trajectories, current: 1, versions: { 1: trajectoryReadyV1 } },
  'train_batch.created': { topic: TOPICS.trainBatches, current: 1, versions: { 1: trainBatchV1 } },
  'weights.published': { topic: TOPICS.weights, current: 1, versions: { 1: weightsPublishedV1 } },
  'policy_version.activated': { topic: TOPICS.policyVersions, current: 1, versions: { 1: policyVersionActivatedV1 } },
} as const;

export type EventType = keyof typeof EVENTS;
type Entry<T extends EventType> = (typeof EVENTS)[T];
type CurrentSchema<T extends EventType> = Entry<T>['versions'][Entry<T>['current']];
export type EventPayload<T extends EventType> = z.infer<CurrentSchema<T>>;

export const EVENT_TYPES = Object.keys(EVENTS) as EventType[];

export function isEventType(value: unknown): value is EventType {
  return typeof value === 'string' && Object.prototype.hasOwnProperty.call(EVENTS, value);
}
