import { Column, CreateDateColumn, Entity, Index, PrimaryColumn, Unique } from 'typeorm';
import { idColumn, timeColumn } from './columns';

/**
 * A batch cut by the Windowed-FIFO scheduler (train_batch.created). The samples themselves
 * travel inline in the event and are not copied here: their tokens are the llm_calls rows
 * named by sample_ids, their advantages those of the trajectories.
 */
@Entity({ name: 'train_batches' })
@Index('idx_train_batches_step', ['step'])
@Unique('uq_train_batches_event', ['eventId'])
export class TrainBatch {
  @PrimaryColumn({ ...idColumn, name: 'id', primaryKeyConstraintName: 'pk_train_batches' })
  id!: string;

  @Column({ ...idColumn, name: 'event_id' })
  eventId!: string;

  @Column({ name: 'step', type: 'integer' })
  step!: number;

  @Column({ name: 'policy_version', type: 'integer' })
  policyVersion!: number;

  @Column({ name: 'trajectory_ids', type: 'text', array: true })
  trajectoryIds!: string[];

  @Column({ name: 'sample_ids', type: 'text', array: true })
  sampleIds!: string[];

  @Column({ name: 'num_samples', type: 'integer' })
  numSamples!: number;

  /** Prompt plus output tokens over all samples (before prefix sharing). */
  @Column({ name: 'num_tokens', type: 'bigint' })
  numTokens!: string;

  @Column({ ...timeColumn, name: 'created_at' })
  createdAt!: Date;

  @CreateDateColumn({ ...timeColumn, name: 'recorded_at' })
  recordedAt!: Date;
}
