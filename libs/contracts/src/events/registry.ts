import type { z } from 'zod';
import { TOPICS } from '../topics';
import { llmCallRecordedV1, llmCallRecordedV2, llmCallRecordedV3 } from './llm-call';
import { evaluationCompletedV1, evaluationRequestedV1 } from './evaluation';
import { rolloutCompletedV1, rolloutStartedV1 } from './rollout';
import { rolloutGroupSettledV1, trajectoryReadyV1 } from './trajectory';
import { trainBatchV1, trainBatchV2 } from './train-batch';
import { trainBatchTrainedV1 } from './trainer';
import { policyVersionActivatedV1, weightsPublishedV1, weightsPublishedV2 } from './weights';

/**
 * Every event the design names: its topic, its schema per version, and the version
 * producers write now. Consumers accept every listed version and reject the rest.
 */
export const EVENTS = {
  'llm_call.recorded': {
    topic: TOPICS.llmCalls,
    current: 3,
    versions: { 1: llmCallRecordedV1, 2: llmCallRecordedV2, 3: llmCallRecordedV3 },
  },
  'rollout.started': { topic: TOPICS.rollouts, current: 1, versions: { 1: rolloutStartedV1 } },
  'rollout.completed': { topic: TOPICS.rollouts, current: 1, versions: { 1: rolloutCompletedV1 } },
  'trajectory.ready': { topic: TOPICS.trajectories, current: 1, versions: { 1: trajectoryReadyV1 } },
  'rollout_group.settled': { topic: TOPICS.trajectories, current: 1, versions: { 1: rolloutGroupSettledV1 } },
  'train_batch.created': { topic: TOPICS.trainBatches, current: 2, versions: { 1: trainBatchV1, 2: trainBatchV2 } },
  'train_batch.trained': { topic: TOPICS.trainBatches, current: 1, versions: { 1: trainBatchTrainedV1 } },
  'evaluation.requested': { topic: TOPICS.evaluations, current: 1, versions: { 1: evaluationRequestedV1 } },
  'evaluation.completed': { topic: TOPICS.evaluations, current: 1, versions: { 1: evaluationCompletedV1 } },
  'weights.published': { topic: TOPICS.weights, current: 2, versions: { 1: weightsPublishedV1, 2: weightsPublishedV2 } },
  'policy_version.activated': { topic: TOPICS.policyVersions, current: 1, versions: { 1: policyVersionActivatedV1 } },
} as const;

export type EventType = keyof typeof EVENTS;
type Entry<T extends EventType> = (typeof EVENTS)[T];
type SchemaAt<T extends EventType, V> = Entry<T>['versions'] extends infer S ? (V extends keyof S ? S[V] : never) : never;
type CurrentSchema<T extends EventType> = SchemaAt<T, Entry<T>['current']>;
export type EventPayload<T extends EventType> = z.infer<CurrentSchema<T>>;
/** The versions of an event type a consumer accepts. */
export type EventVersion<T extends EventType> = keyof Entry<T>['versions'] & number;
/** The payload of one (possibly older) version of an event type. */
export type EventPayloadAt<T extends EventType, V extends EventVersion<T>> = z.infer<SchemaAt<T, V>>;

export const EVENT_TYPES = Object.keys(EVENTS) as EventType[];

export function isEventType(value: unknown): value is EventType {
  return typeof value === 'string' && Object.prototype.hasOwnProperty.call(EVENTS, value);
}
