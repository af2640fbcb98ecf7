/**
 * What a repo-fix task's `data` holds (one JSONL line of a user's SWE-style task set, or a
 * generated built-in task), checked as a whole: every problem named with the task's id.
 *
 *   repo      the repository snapshot the agent starts from: {"dir"}, {"tarball"}, {"git", "ref"}
 *             (paths relative to the environment's `root`), or {"files": {path: text}} inline
 *   setup     run before the agent and again before the held-back tests, in the same sandbox
 *             (no network: vendor what it needs); a shell string or an argv
 *   test      the held-back tests ({"files"} inline and/or a {"dir"} laid over the tree), the
 *             command that runs them, how to read its output, the tests that count, a wall clock
 *   solution  optional reference fix ({"files"} to write): the demonstration, and how the
 *             built-in set proves each of its tasks is solvable
 */
import { existsSync, statSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { z } from 'zod';
import { TEST_FORMATS } from './test-report';

/** A path inside the tree: relative, no `..` segment, no NUL. */
const treePath = z
  .string()
  .min(1)
  .max(4096)
  .refine(
    (p) => !isAbsolute(p) && !p.split(/[\\/]/).includes('..') && !p.includes('\0'),
    'must be a relative path inside the tree (no ..)',
  );
const fileMap = z.record(treePath, z.string().max(4 << 20));
const command = z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]);

export type RepoSnapshot = { files: Record<string, string> } | { dir: string } | { tarball: string } | { git: string; ref: string };

// One object with every kind's fields rather than a union, so a bad field gets its own message.
const repoSchema = z
  .object({
    files: fileMap.optional(),
    dir: z.string().min(1).optional(),
    tarball: z.string().min(1).optional(),
    git: z.string().min(1).optional(),
    ref: z.string().min(1).optional(),
  })
  .strict()
  .superRefine((r, ctx) => {
    const kinds = (['files', 'dir', 'tarball', 'git'] as const).filter((k) => r[k] !== undefined);
    if (kinds.length !== 1)
      ctx.addIssue({ code: 'custom', message: `exactly one of files, dir, tarball or git (got ${kinds.join(', ') || 'none'})` });
    if ((r.git === undefined) !== (r.ref === undefined))
      ctx.addIssue({ code: 'custom', message: 'git and ref go together', path: ['ref'] });
  })
  .transform((r): RepoSnapshot =>
    r.files !== undefined
      ? { files: r.files }
      : r.dir !== undefined
        ? { dir: r.dir }
        : r.tarball !== undefined
          ? { tarball: r.tarball }
          : { git: r.git as string, ref: r.ref as string },
  );

export const repoFixDataSchema = z.object({
  repo: repoSchema,
  setup: command.optional(),
  test: z
    .object({
      command,
      format: z.enum(TEST_FORMATS).default('exit-code'),
      files: fileMap.optional(),
      dir: z.string().min(1).optional(),
      /** The tests that count (ids as the format reports them, or their last dotted part); default: every test reported. */
      names: z.array(z.string().min(1)).min(1).optional(),
      /** Wall clock of the held-back run, setup included (default: the environment's testTimeoutMs). */
      timeoutMs: z.number().int().positive().max(3_600_000).optional(),
    })
    .strict()
    .refine((t) => t.files !== undefined || t.dir !== undefined, { message: 'needs the held-back tests: files and/or dir' }),
  solution: z.object({ files: fileMap }).strict().optional(),
});
export type RepoFixData = z.infer<typeof repoFixDataSchema>;

export class RepoFixTaskError extends Error {
  override readonly name = 'RepoFixTaskError';
}

/** The task's data, parsed; a RepoFixTaskError naming the task and every bad field otherwise. */
export function repoFixData(taskId: string, data: unknown): RepoFixData {
  const r = repoFixDataSchema.safeParse(data);
  if (!r.success)
    throw new RepoFixTaskError(
      `repo-fix task ${taskId}: ${r.error.issues
        // A bad file name: zod wraps the key's own issue, which says what is wrong with it.
        .map((i) => `data.${i.path.join('.') || '(data)'}: ${i.code === 'invalid_key' ? (i.issues[0]?.message ?? i.message) : i.message}`)
        .join('; ')}`,
    );
  return r.data;
}

/** A command as an argv: a string runs through sh -c. */
export const argvOf = (c: string | string[]): string[] => (typeof c === 'string' ? ['sh', '-c', c] : c);

/** Where a path of a task resolves: absolute as given, relative against the environment's root. */
export const resolveIn = (root: string, p: string): string => (isAbsolute(p) ? p : resolve(root, p));

function isDir(p: string): boolean {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
}

/**
 * What on disk a task needs and does not have (a missing snapshot, tarball, repository or test
 * directory), each naming the task; a git ref is checked by `checkGitRef` (it runs git).
 */
export function missingPaths(taskId: string, data: RepoFixData, root: string): string[] {
  const problems: string[] = [];
  const repo = data.repo;
  if ('dir' in repo && !isDir(resolveIn(root, repo.dir)))
    problems.push(`repo-fix task ${taskId}: data.repo.dir ${resolveIn(root, repo.dir)} is not a directory`);
  if ('tarball' in repo && !existsSync(resolveIn(root, repo.tarball)))
    problems.push(`repo-fix task ${taskId}: data.repo.tarball ${resolveIn(root, repo.tarball)} does not exist`);
  if ('git' in repo && !isDir(resolveIn(root, repo.git)))
    problems.push(`repo-fix task ${taskId}: data.repo.git ${resolveIn(root, repo.git)} is not a repository directory`);
  if (data.test.dir !== undefined && !isDir(resolveIn(root, data.test.dir)))
    problems.push(`repo-fix task ${taskId}: data.test.dir ${resolveIn(root, data.test.dir)} is not a directory`);
  return problems;
}
