import type { EventEnvelope, EventPayloadAt } from '@anvil/contracts';
import type { Model } from '@anvil/engine';
import type { MessageBus } from '@anvil/messaging';
import type { Logger } from '@anvil/observability';
import type { PrefixTree } from '@anvil/rl';
import type { CheckpointStore } from './checkpoints/checkpoint-store';
import type { PublishFormat } from './lora/lora-settings';
import type { StepReport, TrainSettings } from './training/train-step';

export type TrainBatchEvent = EventEnvelope<'train_batch.created'>;

/** Where batches' tokens come from: the Data Pool's claim-check reader (v2) and its batch log (catch-up). */
export interface BatchSource {
  /** The v2 batch's prefix tree, checksum verified (throws on a mismatch). */
  tree(event: TrainBatchEvent): Promise<PrefixTree>;
  /** This run's batches with step >= fromStep, in step order (may be empty when the log was pruned). */
  since(runId: string | null, fromStep: number): Promise<TrainBatchEvent[]>;
}

export interface TrainerOptions {
  runId: string;
  settings: TrainSettings;
  /** Publish a new policy version every this many batches (1 = after every batch). */
  publishEvery: number;
  /** Write a full checkpoint (weights + AdamW + position: a resume point) every this many batches. */
  checkpointEvery: number;
  /** Stop the trainer when this many steps were skipped for non-finite values. */
  maxNonFiniteSkips: number;
  /** Policy version of the starting weights (what the inference-proxy serves before any publish). */
  initialVersion: number;
  /** Stop consuming after this many trained batches (0 = no limit): the main job's fixed budget. */
  maxBatches: number;
  /** Consumer group (one per trainer role). */
  group: string;
  /** With LoRA adapters on the model: a version publishes the merged weights ('merged', the default) or the adapter alone ('adapter'). */
  publish?: PublishFormat;
  /** The starting checkpoint directory: the base a published adapter applies to (required with publish 'adapter'). */
  baseCheckpointUri?: string | null;
}

export interface TrainerStepEvent {
  batchId: string;
  batchStep: number;
  /** Version before / after this batch. */
  fromVersion: number;
  version: number;
  trainerStep: number;
  reports: StepReport[];
  /** Staleness of the batch's output tokens against fromVersion. */
  staleness: { mean: number; max: number; shareOlderThan1: number; tokens: number };
  /** Output tokens per lag (index = versions behind fromVersion). */
  stalenessHistogram: number[];
  /** Time the trainer waited for this batch since it finished the previous one (ms). */
  idleMs: number;
  /** Time spent training this batch, checkpointing and publishing (ms). */
  busyMs: number;
  published: boolean;
  checkpointed: boolean;
  /** The batch's Data Pool statistics (v2), when it had them. */
  batchStats: EventPayloadAt<'train_batch.created', 2>['stats'] | null;
}

/** What a TrainerRuntime runs with. */
export interface TrainerDeps {
  bus: MessageBus;
  model: Model;
  store: CheckpointStore;
  batches: BatchSource;
  logger: Logger;
  onStep?: (e: TrainerStepEvent) => void;
  onFatal?: (err: Error) => void;
  /** The mismatch split a sample belongs to (context-management mode, agent kind); default 'all'. */
  splitOf?: (sample: PrefixTree['samples'][number]) => string;
  /** The fixed reference policy of the loss's KL penalty (the run's starting weights, never trained); required when loss.klCoef > 0. */
  reference?: Model;
}

/** Totals for reports: idle and busy time since start, batches, published versions, refused batches. */
export interface TrainerTotals {
  idleMs: number;
  busyMs: number;
  batches: number;
  publishedVersions: number;
  refusedBatches: number;
}

export class TrainerStoppedError extends Error {
  override name = 'TrainerStoppedError';
}

/** A delivery that arrived while the trainer was stopping: not trained, handed back (its offset stays uncommitted). */
export class TrainerStoppingError extends Error {
  override name = 'TrainerStoppingError';
}
