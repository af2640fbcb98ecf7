import type { ServiceMetrics } from '@anvil/observability';
import type { DataPosition } from './checkpoints/checkpoint-store';
import type { TrainerStepEvent } from './runtime';

/** The trainer's Prometheus series (on the service's /metrics, prefixed anvil_). */
export class TrainerMetrics {
  readonly steps;
  readonly skippedSteps;
  readonly batches;
  readonly tokens;
  readonly tokensPerSecond;
  readonly loss;
  readonly gradNorm;
  readonly idleSeconds;
  readonly batchSeconds;
  readonly lastBatchTime;
  readonly policyVersion;
  readonly nextBatchStep;
  readonly staleness;
  readonly sharing;
  readonly fatal;

  constructor(m: ServiceMetrics) {
    this.steps = m.counter('trainer_steps_total', 'Optimizer steps applied');
    this.skippedSteps = m.counter(
      'trainer_skipped_steps_total',
      'Optimizer steps skipped for a non-finite loss or gradient (the weights are left alone)',
    );
    this.batches = m.counter('trainer_batches_total', 'Train batches consumed, by outcome (trained, skipped: every step non-finite)', [
      'outcome',
    ]);
    this.tokens = m.counter(
      'trainer_tokens_total',
      'Tokens trained, by kind (unique: prefix-tree nodes computed; total: what unmerged training would compute; output: tokens carrying loss)',
      ['kind'],
    );
    this.tokensPerSecond = m.gauge(
      'trainer_tokens_per_second',
      'Unique tokens per second of the last batch (its training, checkpoint and publish time)',
    );
    this.loss = m.gauge('trainer_loss', 'Loss (-J) of the last applied optimizer step');
    this.gradNorm = m.gauge('trainer_grad_norm', 'Global gradient norm (before clipping) of the last applied optimizer step');
    this.idleSeconds = m.counter('trainer_idle_seconds_total', 'Time spent waiting for a batch (added when the batch arrives)');
    this.batchSeconds = m.histogram(
      'trainer_batch_seconds',
      'Time per batch: train, checkpoint, publish',
      [],
      [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800],
    );
    this.lastBatchTime = m.gauge(
      'trainer_last_batch_timestamp_seconds',
      'When the last batch finished (time() minus this = the current idle time)',
    );
    this.policyVersion = m.gauge('trainer_policy_version', 'Policy version of the weights the trainer holds');
    this.nextBatchStep = m.gauge('trainer_next_batch_step', 'Data position: train_batch.created step of the next batch to train');
    this.staleness = m.gauge(
      'trainer_staleness_versions',
      'Mean staleness (versions behind the trained weights) of the last batch’s output tokens',
    );
    this.sharing = m.gauge('trainer_prefix_sharing', 'Prefix sharing of the last batch: 1 - unique / total tokens');
    this.fatal = m.gauge('trainer_fatal', '1 once the trainer stopped on a fatal error (too many non-finite steps)');
  }

  /** The state a start (fresh or resumed) begins from. */
  started(version: number, position: DataPosition): void {
    this.policyVersion.set(version);
    this.nextBatchStep.set(position.nextBatchStep);
  }

  step(e: TrainerStepEvent, position: DataPosition): void {
    const applied = e.reports.filter((r) => r.skipped === null);
    this.steps.inc(applied.length);
    this.skippedSteps.inc(e.reports.length - applied.length);
    this.batches.inc({ outcome: applied.length > 0 ? 'trained' : 'skipped' });
    let unique = 0,
      total = 0,
      output = 0;
    for (const r of e.reports) {
      unique += r.uniqueTokens;
      total += r.totalTokens;
      output += r.outputTokens;
    }
    this.tokens.inc({ kind: 'unique' }, unique);
    this.tokens.inc({ kind: 'total' }, total);
    this.tokens.inc({ kind: 'output' }, output);
    this.tokensPerSecond.set(unique / Math.max(1e-9, e.busyMs / 1000));
    const last = applied[applied.length - 1];
    if (last) {
      this.loss.set(last.loss);
      this.gradNorm.set(last.gradNorm);
    }
    this.idleSeconds.inc(e.idleMs / 1000);
    this.batchSeconds.observe(e.busyMs / 1000);
    this.lastBatchTime.set(Date.now() / 1000);
    this.policyVersion.set(e.version);
    this.nextBatchStep.set(position.nextBatchStep);
    this.staleness.set(e.staleness.mean);
    if (total > 0) this.sharing.set(1 - unique / total);
  }
}
