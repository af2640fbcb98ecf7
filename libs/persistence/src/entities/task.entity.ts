import { Column, CreateDateColumn, Entity, Index, JoinColumn, ManyToOne, PrimaryColumn, type Relation } from 'typeorm';
import { idColumn, timeColumn, type JsonObject } from './columns';
import { TaskSet } from './task-set.entity';

/** One task: what the agent is asked to do and what its verifier needs. */
@Entity({ name: 'tasks' })
@Index('idx_tasks_task_set', ['taskSetId'])
export class Task {
  @PrimaryColumn({ ...idColumn, name: 'id', primaryKeyConstraintName: 'pk_tasks' })
  id!: string;

  @Column({ ...idColumn, name: 'task_set_id' })
  taskSetId!: string;

  /** The task payload (prompt, tools, verifier arguments); empty until the rollout manager registers it. */
  @Column({ name: 'spec', type: 'jsonb' })
  spec!: JsonObject;

  @CreateDateColumn({ ...timeColumn, name: 'created_at' })
  createdAt!: Date;

  @ManyToOne(() => TaskSet, { onDelete: 'CASCADE' })
  @JoinColumn({ name: 'task_set_id', foreignKeyConstraintName: 'fk_tasks_task_set' })
  taskSet?: Relation<TaskSet>;
}
