import type { ServiceMetrics } from '@anvil/observability';

/** The manager's Prometheus series (on the service's /metrics, prefixed anvil_). */
export class RolloutMetrics {
  readonly inFlight;
  readonly queued;
  readonly started;
  readonly completed;
  readonly admissionWaitSeconds;
  readonly admissionRefusals;
  readonly admissionBlockedSeconds;
  readonly agentSeconds;
  readonly envRetries;
  readonly overheadSeconds;
  readonly sessionsAhead;

  constructor(m: ServiceMetrics) {
    this.inFlight = m.gauge('rollouts_in_flight', 'Rollouts running (agent started, not yet completed)');
    this.queued = m.gauge('rollouts_queued', 'Rollouts submitted and not yet started (waiting for admission or a slot)');
    this.started = m.counter('rollouts_started_total', 'Rollouts started, by purpose (train, eval) and agent kind', ['purpose', 'agent']);
    this.completed = m.counter('rollouts_completed_total', 'Rollouts completed, by finish reason', ['finish_reason', 'purpose']);
    this.admissionWaitSeconds = m.histogram(
      'rollout_admission_wait_seconds',
      'Submission to admission of a group',
      [],
      [0.01, 0.1, 0.5, 1, 5, 15, 60, 300, 1800],
    );
    this.admissionRefusals = m.counter(
      'rollout_admission_refusals_total',
      'Admission attempts the staleness controller refused, by reason',
      ['reason'],
    );
    this.admissionBlockedSeconds = m.counter(
      'rollout_admission_blocked_seconds_total',
      'Time a train group waited at the head of the queue, by what held it: capacity or version (the staleness controller), slots (N rollouts running)',
      ['reason'],
    );
    this.agentSeconds = m.histogram(
      'rollout_agent_seconds',
      'Agent wall time per rollout, by agent kind',
      ['agent'],
      [0.05, 0.25, 1, 5, 15, 60, 300, 1800],
    );
    this.envRetries = m.counter('rollout_env_retries_total', 'Rollout attempts retried after an environment failure');
    this.overheadSeconds = m.histogram(
      'rollout_overhead_seconds',
      "What the manager adds to a rollout: its wall time (slot to durable rollout.completed) minus the agent's own",
      ['agent'],
      [0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 30],
    );
    this.sessionsAhead = m.gauge('rollout_sessions_ahead', 'Gateway sessions opening or open for rollouts still waiting for a slot');
  }
}
