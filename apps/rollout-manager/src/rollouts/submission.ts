import { seededShuffle } from '@anvil/rl';
import type { StoredTask } from '../tasks/jsonl';

export interface SubmitRequest {
  taskSetId: string;
  groupSize?: number;
  taskIds?: string[];
  repeat?: number;
  split?: 'train' | 'eval';
  shuffleSeed?: number;
}

/**
 * The tasks of a submission in queue order, one group each: the chosen tasks (by id or source
 * id, else the split, train by default) in stored order (task id), or with `shuffleSeed` in a
 * seeded permutation, a new one for each of the `repeat` rounds. Unknown task ids: refused.
 */
export function submissionTasks(req: SubmitRequest, all: StoredTask[]): StoredTask[] {
  const chosen = req.taskIds
    ? all.filter((t) => req.taskIds?.includes(t.id) || req.taskIds?.includes(String(t.metadata?.sourceId)))
    : all.filter((t) => t.split === (req.split ?? 'train'));
  if (req.taskIds && chosen.length !== req.taskIds.length)
    throw new Error(`taskIds: ${req.taskIds.length - chosen.length} unknown in task set ${req.taskSetId}`);
  const seed = req.shuffleSeed;
  return Array.from({ length: req.repeat ?? 1 }, (_, r) =>
    seed === undefined ? chosen : seededShuffle(chosen, (seed + Math.imul(r, 0x9e3779b9)) >>> 0),
  ).flat();
}
