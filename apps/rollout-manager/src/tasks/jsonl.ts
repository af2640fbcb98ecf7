import type { EnvTask, Split } from '../environments/types';
import { taskLineSchema, type VerifierSpec } from './task-set';

/** A task as stored in tasks.spec: the environment's task plus its verifier, and what a black-box agent's workspace starts from. */
export interface StoredTask extends EnvTask {
  verifier?: VerifierSpec;
  /** A directory copied into the rollout's workspace before the agent starts (absolute, or relative to the agent's cwd). */
  workspace?: string;
  /** Run first in the agent's sandbox, on the rollout's wall clock. */
  setup?: string[];
}

export interface TaskFileProblem {
  line: number;
  reason: string;
}

/** A malformed task file is refused whole; the error names every bad line and why. */
export class TaskFileError extends Error {
  override readonly name = 'TaskFileError';
  constructor(
    readonly problems: TaskFileProblem[],
    source: string,
  ) {
    super(`task file ${source}: ${problems.length} bad line(s): ${problems.map((p) => `line ${p.line}: ${p.reason}`).join('; ')}`);
  }
}

/** Parses a JSONL task file (blank lines skipped). Throws TaskFileError listing every bad line (1-based). */
export function parseTaskJsonl(text: string, source = '<jsonl>'): StoredTask[] {
  const problems: TaskFileProblem[] = [];
  const tasks: StoredTask[] = [];
  const seen = new Map<string, number>();
  const lines = text.split(/\r?\n/);
  lines.forEach((raw, i) => {
    const line = i + 1;
    if (raw.trim() === '') return;
    let json: unknown;
    try {
      json = JSON.parse(raw);
    } catch (err) {
      problems.push({ line, reason: `invalid JSON (${(err as Error).message})` });
      return;
    }
    const r = taskLineSchema.safeParse(json);
    if (!r.success) {
      problems.push({ line, reason: r.error.issues.map((iss) => `${iss.path.join('.') || '(line)'}: ${iss.message}`).join(', ') });
      return;
    }
    const t = r.data;
    const prev = seen.get(t.id);
    if (prev !== undefined) {
      problems.push({ line, reason: `id: duplicate of line ${prev} (${JSON.stringify(t.id)})` });
      return;
    }
    seen.set(t.id, line);
    const split = (t.split ?? t.metadata.split ?? 'train') as Split;
    if (split !== 'train' && split !== 'eval') {
      problems.push({ line, reason: `metadata.split: must be train or eval, got ${JSON.stringify(split)}` });
      return;
    }
    const difficulty = t.difficulty ?? (typeof t.metadata.difficulty === 'number' ? t.metadata.difficulty : 0);
    const messages = t.messages ?? [
      ...(t.system ? [{ role: 'system' as const, content: t.system }] : []),
      { role: 'user' as const, content: t.prompt as string },
    ];
    tasks.push({
      id: t.id,
      env: null,
      messages,
      tools: t.tools,
      split,
      difficulty,
      data: t.data,
      metadata: t.metadata,
      ...(t.verifier ? { verifier: t.verifier } : {}),
      ...(t.workspace ? { workspace: t.workspace } : {}),
      ...(t.setup ? { setup: t.setup } : {}),
    });
  });
  if (problems.length) throw new TaskFileError(problems, source);
  return tasks;
}
