/**
 * Kafka topic names. The suffix is the topic generation: a breaking change of partitioning
 * or retention gets a new topic, while payload changes are versioned per event.
 * Every topic is keyed by rollout id (or by version for weights), so one rollout's events
 * stay ordered on one partition.
 */
export const TOPICS = {
  llmCalls: 'anvil.llm-calls.v1',
  rollouts: 'anvil.rollouts.v1',
  trajectories: 'anvil.trajectories.v1',
  trainBatches: 'anvil.train-batches.v1',
  weights: 'anvil.weights.v1',
  policyVersions: 'anvil.policy-versions.v1',
  evaluations: 'anvil.evaluations.v1',
} as const;
export type TopicName = (typeof TOPICS)[keyof typeof TOPICS];

/** Per consumer group: a failed message is retried from here before it is dead-lettered. */
export const retryTopicOf = (topic: string, group: string) => `${topic}.retry.${group}`;
/** Per consumer group, so one group's poison message never hides another group's. */
export const deadLetterTopicOf = (topic: string, group: string) => `${topic}.dlq.${group}`;

/** Largest encoded event accepted (the broker is configured for 16 MiB messages). */
export const MAX_EVENT_BYTES = 12 * 1024 * 1024;
