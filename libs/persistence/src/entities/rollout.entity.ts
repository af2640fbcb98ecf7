import { Column, CreateDateColumn, Entity, Index, JoinColumn, ManyToOne, PrimaryColumn, Unique, type Relation } from 'typeorm';
import type { RolloutFinishReason } from '@anvil/contracts';
import { idColumn, timeColumn } from './columns';
import { RolloutGroup } from './rollout-group.entity';

export type RolloutStatus = 'running' | 'completed';

/** One agent run on one task, from rollout.started to rollout.completed. */
@Entity({ name: 'rollouts' })
@Index('idx_rollouts_group', ['groupId'])
@Index('idx_rollouts_status', ['status'])
@Unique('uq_rollouts_started_event', ['startedEventId'])
@Unique('uq_rollouts_completed_event', ['completedEventId'])
export class Rollout {
  @PrimaryColumn({ ...idColumn, name: 'id', primaryKeyConstraintName: 'pk_rollouts' })
  id!: string;

  @Column({ ...idColumn, name: 'group_id' })
  groupId!: string;

  @Column({ ...idColumn, name: 'task_id' })
  taskId!: string;

  @Column({ name: 'sample_index', type: 'integer' })
  sampleIndex!: number;

  @Column({ name: 'agent_kind', type: 'varchar', length: 16 })
  agentKind!: 'white-box' | 'black-box';

  @Column({ name: 'agent_name', type: 'text' })
  agentName!: string;

  @Column({ name: 'policy_version_at_start', type: 'integer' })
  policyVersionAtStart!: number;

  @Column({ name: 'status', type: 'varchar', length: 16 })
  status!: RolloutStatus;

  @Column({ name: 'finish_reason', type: 'varchar', length: 32, nullable: true })
  finishReason!: RolloutFinishReason | null;

  @Column({ name: 'outcome_reward', type: 'double precision', nullable: true })
  outcomeReward!: number | null;

  @Column({ name: 'num_calls', type: 'integer', nullable: true })
  numCalls!: number | null;

  @Column({ name: 'error', type: 'text', nullable: true })
  error!: string | null;

  @Column({ ...timeColumn, name: 'started_at' })
  startedAt!: Date;

  @Column({ ...timeColumn, name: 'completed_at', nullable: true })
  completedAt!: Date | null;

  /** The events that created and completed this row: a redelivery matches and changes nothing. */
  @Column({ ...idColumn, name: 'started_event_id' })
  startedEventId!: string;

  @Column({ ...idColumn, name: 'completed_event_id', nullable: true })
  completedEventId!: string | null;

  @CreateDateColumn({ ...timeColumn, name: 'recorded_at' })
  recordedAt!: Date;

  @ManyToOne(() => RolloutGroup, { onDelete: 'CASCADE' })
  @JoinColumn({ name: 'group_id', foreignKeyConstraintName: 'fk_rollouts_group' })
  group?: Relation<RolloutGroup>;
}
