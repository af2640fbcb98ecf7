/**
 * rollout.completed arrived for a rollout this database has never seen started. Both
 * events share a topic and key, so this means rollout.started was not applied (yet):
 * thrown so the consumer retries instead of losing the completion.
 */
export class UnknownRolloutError extends Error {
  constructor(readonly rolloutId: string) {
    super(`rollout ${rolloutId} completed but its rollout.started has not been recorded`);
    this.name = 'UnknownRolloutError';
  }
}
