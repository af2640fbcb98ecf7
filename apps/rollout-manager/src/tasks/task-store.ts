import type { DataSource } from 'typeorm';
import { Task, TaskSet, upsertRows, type JsonObject } from '@anvil/persistence';
import type { StoredTask } from './jsonl';
import type { TaskSetSpec } from './task-set';

export const qualifiedTaskId = (taskSetId: string, id: string) => (id.startsWith(`${taskSetId}/`) ? id : `${taskSetId}/${id}`);

/**
 * Task sets and tasks in PostgreSQL (task_sets.config = the declaration, tasks.spec = the
 * task). Loading is an upsert by id in one transaction: re-loading the same file changes
 * nothing, and a file is written whole or not at all.
 */
export class RolloutTaskStore {
  constructor(private readonly ds: DataSource) {}

  /**
   * Task ids are qualified by the set (`<taskSetId>/<id>`, the id rollout events carry), so two
   * sets may hold the same task. Throws when a qualified id is over 128 characters.
   */
  async load(spec: TaskSetSpec, raw: StoredTask[]): Promise<{ taskSetId: string; tasks: number }> {
    const tasks = raw.map((t) => ({ ...t, id: qualifiedTaskId(spec.id, t.id), metadata: { ...(t.metadata ?? {}), sourceId: t.id } }));
    const long = tasks.filter((t) => t.id.length > 128).map((t) => t.metadata.sourceId);
    if (long.length)
      throw new Error(`tasks: ids too long once qualified by task set ${spec.id} (max 128): ${long.slice(0, 10).join(', ')}`);
    await this.ds.transaction(async (m) => {
      await upsertRows(m, TaskSet, [{ id: spec.id, name: spec.name, config: spec as unknown as JsonObject }], ['id']);
      for (let i = 0; i < tasks.length; i += 500) {
        await upsertRows(
          m,
          Task,
          tasks.slice(i, i + 500).map((t) => ({ id: t.id, taskSetId: spec.id, spec: t as unknown as JsonObject })),
          ['id'],
        );
      }
    });
    return { taskSetId: spec.id, tasks: tasks.length };
  }

  async spec(taskSetId: string): Promise<TaskSetSpec | null> {
    const row = await this.ds.manager.findOne(TaskSet, { where: { id: taskSetId } });
    return row ? (row.config as unknown as TaskSetSpec) : null;
  }

  async tasks(taskSetId: string): Promise<StoredTask[]> {
    const rows = await this.ds.manager.find(Task, { where: { taskSetId }, order: { id: 'ASC' } });
    return rows.map((r) => r.spec as unknown as StoredTask);
  }
}
