import { Column, CreateDateColumn, Entity, Index, JoinColumn, ManyToOne, PrimaryGeneratedColumn, Unique, type Relation } from 'typeorm';
import { idColumn, timeColumn } from './columns';
import { Rollout } from './rollout.entity';

export type RewardKind = 'outcome' | 'process';

/**
 * A reward from a rollout.completed event: the verifier outcome, or a process reward
 * attached to one call. (event_id, ordinal) is its natural key, so a redelivery adds nothing.
 */
@Entity({ name: 'rewards' })
@Index('idx_rewards_rollout', ['rolloutId'])
@Unique('uq_rewards_event_ordinal', ['eventId', 'ordinal'])
export class Reward {
  /** bigint: read back as a string, as node-postgres does. */
  @PrimaryGeneratedColumn('identity', { name: 'id', type: 'bigint', generatedIdentity: 'ALWAYS', primaryKeyConstraintName: 'pk_rewards' })
  id!: string;

  @Column({ ...idColumn, name: 'rollout_id' })
  rolloutId!: string;

  /** The call a process reward belongs to; null for the outcome reward. */
  @Column({ ...idColumn, name: 'call_id', nullable: true })
  callId!: string | null;

  @Column({ name: 'kind', type: 'varchar', length: 16 })
  kind!: RewardKind;

  @Column({ name: 'value', type: 'double precision' })
  value!: number;

  @Column({ name: 'label', type: 'varchar', length: 200, nullable: true })
  label!: string | null;

  @Column({ ...idColumn, name: 'event_id' })
  eventId!: string;

  /** Position within its event: 0 is the outcome, process rewards follow in event order. */
  @Column({ name: 'ordinal', type: 'integer' })
  ordinal!: number;

  @CreateDateColumn({ ...timeColumn, name: 'recorded_at' })
  recordedAt!: Date;

  @ManyToOne(() => Rollout, { onDelete: 'CASCADE' })
  @JoinColumn({ name: 'rollout_id', foreignKeyConstraintName: 'fk_rewards_rollout' })
  rollout?: Relation<Rollout>;
}
