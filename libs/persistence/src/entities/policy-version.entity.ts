import { Column, CreateDateColumn, Entity, JoinColumn, ManyToOne, PrimaryColumn, Unique, type Relation } from 'typeorm';
import { idColumn, timeColumn } from './columns';
import { Checkpoint } from './checkpoint.entity';

/** A published policy version: every generated token is stamped with one of these numbers. */
@Entity({ name: 'policy_versions' })
@Unique('uq_policy_versions_event', ['eventId'])
export class PolicyVersion {
  @PrimaryColumn({ name: 'version', type: 'integer', primaryKeyConstraintName: 'pk_policy_versions' })
  version!: number;

  @Column({ name: 'parent_version', type: 'integer', nullable: true })
  parentVersion!: number | null;

  @Column({ name: 'step', type: 'integer' })
  step!: number;

  @Column({ ...idColumn, name: 'checkpoint_id' })
  checkpointId!: string;

  @Column({ ...timeColumn, name: 'published_at' })
  publishedAt!: Date;

  @Column({ ...idColumn, name: 'event_id' })
  eventId!: string;

  @CreateDateColumn({ ...timeColumn, name: 'recorded_at' })
  recordedAt!: Date;

  @ManyToOne(() => Checkpoint)
  @JoinColumn({ name: 'checkpoint_id', foreignKeyConstraintName: 'fk_policy_versions_checkpoint' })
  checkpoint?: Relation<Checkpoint>;
}
