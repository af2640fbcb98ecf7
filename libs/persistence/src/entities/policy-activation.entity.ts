import { Column, CreateDateColumn, Entity, Index, PrimaryColumn } from 'typeorm';
import { idColumn, timeColumn } from './columns';

/**
 * An inference deployment switched to a policy version (policy_version.activated). No
 * foreign key to policy_versions: activations travel on their own topic.
 */
@Entity({ name: 'policy_activations' })
@Index('idx_policy_activations_version', ['version'])
export class PolicyActivation {
  @PrimaryColumn({ ...idColumn, name: 'event_id', primaryKeyConstraintName: 'pk_policy_activations' })
  eventId!: string;

  @Column({ name: 'version', type: 'integer' })
  version!: number;

  @Column({ ...idColumn, name: 'deployment' })
  deployment!: string;

  @Column({ name: 'swap_policy', type: 'varchar', length: 32 })
  swapPolicy!: 'drain-then-swap' | 'abort-and-resume';

  @Column({ ...timeColumn, name: 'activated_at' })
  activatedAt!: Date;

  @CreateDateColumn({ ...timeColumn, name: 'recorded_at' })
  recordedAt!: Date;
}
