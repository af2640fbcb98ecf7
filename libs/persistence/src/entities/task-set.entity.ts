import { Column, CreateDateColumn, Entity, PrimaryColumn } from 'typeorm';
import { idColumn, timeColumn, type JsonObject } from './columns';

/** A named collection of tasks (a dataset split, a benchmark) that rollout groups draw from. */
@Entity({ name: 'task_sets' })
export class TaskSet {
  @PrimaryColumn({ ...idColumn, name: 'id', primaryKeyConstraintName: 'pk_task_sets' })
  id!: string;

  @Column({ name: 'name', type: 'text' })
  name!: string;

  /** Where the tasks come from and how they are verified; owned by the rollout manager. */
  @Column({ name: 'config', type: 'jsonb' })
  config!: JsonObject;

  @CreateDateColumn({ ...timeColumn, name: 'created_at' })
  createdAt!: Date;
}
