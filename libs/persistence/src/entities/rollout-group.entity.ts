import { Column, CreateDateColumn, Entity, Index, JoinColumn, ManyToOne, PrimaryColumn, type Relation } from 'typeorm';
import { idColumn, timeColumn } from './columns';
import { Task } from './task.entity';

/** G rollouts of one task; group-relative advantages are computed over its members. */
@Entity({ name: 'rollout_groups' })
@Index('idx_rollout_groups_task', ['taskId'])
export class RolloutGroup {
  @PrimaryColumn({ ...idColumn, name: 'id', primaryKeyConstraintName: 'pk_rollout_groups' })
  id!: string;

  @Column({ ...idColumn, name: 'task_id' })
  taskId!: string;

  @Column({ name: 'group_size', type: 'integer' })
  groupSize!: number;

  @CreateDateColumn({ ...timeColumn, name: 'created_at' })
  createdAt!: Date;

  @ManyToOne(() => Task)
  @JoinColumn({ name: 'task_id', foreignKeyConstraintName: 'fk_rollout_groups_task' })
  task?: Relation<Task>;
}
