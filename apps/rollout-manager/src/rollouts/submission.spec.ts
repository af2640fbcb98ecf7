import { describe, expect, it } from 'vitest';
import type { StoredTask } from '../tasks/jsonl';
import { submissionTasks } from './submission';

const task = (id: string, split: 'train' | 'eval', sourceId?: string): StoredTask => ({
  id,
  env: null,
  messages: [{ role: 'user', content: id }],
  tools: [],
  split,
  difficulty: 1,
  data: {},
  ...(sourceId ? { metadata: { sourceId } } : {}),
});

const all = [
  task('s/a', 'train', 'a'),
  task('s/b', 'train', 'b'),
  task('s/c', 'train', 'c'),
  task('s/d', 'train', 'd'),
  task('s/e', 'eval'),
];
const ids = (ts: StoredTask[]) => ts.map((t) => t.id);

describe('submissionTasks', () => {
  it('takes the train split in stored order by default, the split asked for otherwise, `repeat` rounds of it', () => {
    expect(ids(submissionTasks({ taskSetId: 's' }, all))).toEqual(['s/a', 's/b', 's/c', 's/d']);
    expect(ids(submissionTasks({ taskSetId: 's', split: 'eval', repeat: 2 }, all))).toEqual(['s/e', 's/e']);
  });

  it('chooses tasks by id or by source id, and refuses ids the task set does not have', () => {
    expect(ids(submissionTasks({ taskSetId: 's', taskIds: ['s/c', 'a'] }, all))).toEqual(['s/a', 's/c']);
    expect(() => submissionTasks({ taskSetId: 's', taskIds: ['s/a', 'nope', 'gone'] }, all)).toThrow('taskIds: 2 unknown in task set s');
  });

  it('with a shuffleSeed: a seeded permutation per round, the same for the same seed, each round a permutation of the whole', () => {
    const a = ids(submissionTasks({ taskSetId: 's', shuffleSeed: 7, repeat: 3 }, all));
    expect(ids(submissionTasks({ taskSetId: 's', shuffleSeed: 7, repeat: 3 }, all))).toEqual(a);
    const rounds = [a.slice(0, 4), a.slice(4, 8), a.slice(8, 12)];
    for (const r of rounds) expect([...r].sort()).toEqual(['s/a', 's/b', 's/c', 's/d']);
    expect(new Set(rounds.map((r) => r.join())).size).toBeGreaterThan(1);
    expect(ids(submissionTasks({ taskSetId: 's', shuffleSeed: 8, repeat: 3 }, all))).not.toEqual(a);
  });
});
