import { Column, CreateDateColumn, Entity, Index, JoinColumn, ManyToOne, PrimaryColumn, Unique, type Relation } from 'typeorm';
import type { RolloutFinishReason } from '@anvil/contracts';
import { idColumn, timeColumn } from './columns';
import { Rollout } from './rollout.entity';
import { TrainBatch } from './train-batch.entity';

/** ready: waiting for the scheduler; scheduled: part of a train batch. */
export type TrajectoryStatus = 'ready' | 'scheduled';

/** A finished rollout assembled by the Data Pool (trajectory.ready): its calls, reward and advantage. */
@Entity({ name: 'trajectories' })
@Index('idx_trajectories_rollout', ['rolloutId'])
@Index('idx_trajectories_group', ['groupId'])
@Index('idx_trajectories_status_ready', ['status', 'readyAt'])
@Index('idx_trajectories_train_batch', ['trainBatchId'])
@Unique('uq_trajectories_event', ['eventId'])
export class Trajectory {
  @PrimaryColumn({ ...idColumn, name: 'id', primaryKeyConstraintName: 'pk_trajectories' })
  id!: string;

  @Column({ ...idColumn, name: 'event_id' })
  eventId!: string;

  /** No foreign key: trajectory.ready travels on another topic than rollout.started. */
  @Column({ ...idColumn, name: 'rollout_id' })
  rolloutId!: string;

  @Column({ ...idColumn, name: 'group_id' })
  groupId!: string;

  @Column({ ...idColumn, name: 'task_id' })
  taskId!: string;

  @Column({ name: 'call_ids', type: 'text', array: true })
  callIds!: string[];

  @Column({ name: 'finish_reason', type: 'varchar', length: 32 })
  finishReason!: RolloutFinishReason;

  @Column({ name: 'reward', type: 'double precision' })
  reward!: number;

  @Column({ name: 'advantage', type: 'double precision' })
  advantage!: number;

  /** Per-call advantages aligned with callIds (process rewards combined with the outcome); null: every call takes `advantage`. */
  @Column({ name: 'call_advantages', type: 'double precision', array: true, nullable: true })
  callAdvantages!: number[] | null;

  /** Compact filtering: kept for statistics, excluded from the loss. */
  @Column({ name: 'loss_masked', type: 'boolean' })
  lossMasked!: boolean;

  @Column({ name: 'min_policy_version', type: 'integer' })
  minPolicyVersion!: number;

  @Column({ name: 'max_policy_version', type: 'integer' })
  maxPolicyVersion!: number;

  @Column({ name: 'prompt_tokens', type: 'integer' })
  promptTokens!: number;

  @Column({ name: 'output_tokens', type: 'integer' })
  outputTokens!: number;

  @Column({ ...timeColumn, name: 'ready_at' })
  readyAt!: Date;

  @Column({ name: 'status', type: 'varchar', length: 16 })
  status!: TrajectoryStatus;

  @Column({ ...idColumn, name: 'train_batch_id', nullable: true })
  trainBatchId!: string | null;

  @CreateDateColumn({ ...timeColumn, name: 'recorded_at' })
  recordedAt!: Date;

  @ManyToOne(() => Rollout, { createForeignKeyConstraints: false })
  @JoinColumn({ name: 'rollout_id' })
  rollout?: Relation<Rollout>;

  @ManyToOne(() => TrainBatch, { onDelete: 'SET NULL' })
  @JoinColumn({ name: 'train_batch_id', foreignKeyConstraintName: 'fk_trajectories_train_batch' })
  trainBatch?: Relation<TrainBatch>;
}
