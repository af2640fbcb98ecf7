import type { DataSource, EntityManager } from 'typeorm';
import { Task, TaskSet, upsertRows, type JsonObject } from '@anvil/persistence';

export interface TaskSetDefinition {
  id: string;
  name: string;
  config?: JsonObject;
}

export interface TaskDefinition {
  id: string;
  spec: JsonObject;
}

/** Task sets and tasks as the rollout manager registers them (re-registering updates them). */
export class TaskStore {
  constructor(private readonly ds: DataSource) {}

  async upsertTaskSet(set: TaskSetDefinition, manager?: EntityManager): Promise<void> {
    await upsertRows(manager ?? this.ds.manager, TaskSet, [{ id: set.id, name: set.name, config: set.config ?? {} }], ['id']);
  }

  async upsertTasks(taskSetId: string, tasks: TaskDefinition[], manager?: EntityManager): Promise<void> {
    await upsertRows(
      manager ?? this.ds.manager,
      Task,
      tasks.map((task) => ({ id: task.id, taskSetId, spec: task.spec })),
      ['id'],
    );
  }

  tasksOfSet(taskSetId: string, manager?: EntityManager): Promise<Task[]> {
    return (manager ?? this.ds.manager).find(Task, { where: { taskSetId }, order: { id: 'ASC' } });
  }
}
