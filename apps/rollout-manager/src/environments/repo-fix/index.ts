/**
 * Built-in environment "repo-fix": a coding task on a repository snapshot, for black-box coding
 * agents (the harness presets). A task names the snapshot, a setup command, the problem
 * statement (its prompt) and the held-back tests with the command that runs them
 * (task-data.ts; docs/repo-fix.md for a user's own SWE-style JSONL).
 *
 *  - The agent works in its own sandboxed copy: `prepareWorkspace` lays the snapshot into its
 *    working directory (with a git repository of its own there, for agents that use git), takes
 *    a baseline the agent cannot see, and hands the setup command to the agent's sandbox.
 *  - The verifier takes the agent's diff against that baseline and runs the held-back tests on
 *    it in a fresh sandbox (held-back.ts): reward = share of the counted tests passing, success =
 *    all pass. A diff that does not apply scores 0; a setup that fails or a test command that
 *    outruns its wall clock is an environment error naming the task.
 *  - Built-in tasks (builtin/): small Python and JavaScript modules with seeded bugs, three
 *    difficulty levels, train and eval splits that hold out whole bugs, from a seeded generator.
 *
 * Config: languages, levels (1..3), evalFraction, root (where relative snapshot paths resolve),
 * sandbox (the verifier's: local | none), testTimeoutMs, maxSteps (LLM calls per rollout),
 * maxDiffBytes.
 */
import { join } from 'node:path';
import { createSandbox, type SandboxBackend } from '@anvil/sandbox';
import { z } from 'zod';
import type { AgentWork, ChatMessage, Environment, EnvTask, Episode, EpisodeContext, Split, Transcript, VerifyResult } from '../types';
import { Baseline } from './baseline';
import { generateRepoFixTasks } from './builtin/generate';
import { LANGUAGES } from './builtin/render';
import { git } from './git';
import { RepoFixVerifyError, runHeldBackTests } from './held-back';
import { gitRefProblem, layOutSnapshot } from './snapshot';
import { argvOf, missingPaths, repoFixData, RepoFixTaskError, resolveIn } from './task-data';

export const repoFixConfigSchema = z
  .object({
    languages: z
      .array(z.enum(LANGUAGES as ['python', 'javascript']))
      .min(1)
      .default([...LANGUAGES]),
    levels: z
      .union([
        z.number().int().min(1).max(3),
        z.object({ min: z.number().int().min(1).max(3), max: z.number().int().min(1).max(3) }).strict(),
      ])
      .default({ min: 1, max: 3 }),
    evalFraction: z.number().min(0).max(1).default(0.2),
    root: z.string().min(1).optional(),
    sandbox: z.enum(['local', 'none']).default('local'),
    testTimeoutMs: z.number().int().positive().max(3_600_000).default(120_000),
    maxSteps: z.number().int().positive().max(10_000).default(30),
    maxDiffBytes: z
      .number()
      .int()
      .positive()
      .default(4 << 20),
  })
  .strict()
  .refine((c) => typeof c.levels === 'number' || c.levels.min <= c.levels.max, { message: 'levels: min must be <= max', path: ['levels'] });
export type RepoFixConfig = z.infer<typeof repoFixConfigSchema>;

export class RepoFixConfigError extends Error {
  override readonly name = 'RepoFixConfigError';
}

export { RepoFixTaskError, RepoFixVerifyError };

export class RepoFixEnvironment implements Environment<RepoFixConfig> {
  readonly name = 'repo-fix';
  readonly config: RepoFixConfig;
  private readonly root: string;
  /** The baselines of the workspaces prepared and not yet closed, by working directory. */
  private readonly baselines = new Map<string, Baseline>();
  private sandbox: Promise<SandboxBackend> | null = null;

  constructor(
    config: Record<string, unknown> = {},
    private readonly makeSandbox = createSandbox,
  ) {
    const r = repoFixConfigSchema.safeParse(config);
    if (!r.success)
      throw new RepoFixConfigError(
        `repo-fix config: ${r.error.issues.map((i) => `${i.path.join('.') || '(config)'}: ${i.message}`).join('; ')}`,
      );
    this.config = r.data;
    this.root = r.data.root ?? process.cwd();
  }

  generate({ seed, count, split }: { seed: number; count: number; split: Split }): EnvTask[] {
    const l = this.config.levels;
    return generateRepoFixTasks({
      seed,
      count,
      split,
      languages: this.config.languages,
      levels: typeof l === 'number' ? { min: l, max: l } : l,
      evalFraction: this.config.evalFraction,
    });
  }

  limits(): { maxSteps: number } {
    return { maxSteps: this.config.maxSteps };
  }

  /** Every problem of a task known before a run: its data, and the files and git ref it names. */
  checkTask(task: EnvTask): string[] {
    let data;
    try {
      data = repoFixData(task.id, task.data);
    } catch (err) {
      return [(err as Error).message];
    }
    const problems = missingPaths(task.id, data, this.root);
    if (problems.length === 0 && 'git' in data.repo) {
      const bad = gitRefProblem(resolveIn(this.root, data.repo.git), data.repo.ref);
      if (bad) problems.push(`repo-fix task ${task.id}: ${bad}`);
    }
    return problems;
  }

  reset(task: EnvTask, _ctx: EpisodeContext): Episode {
    const data = repoFixData(task.id, task.data);
    let prepared: string | null = null;
    return {
      executeTool: async (call) => ({
        content: `error: repo-fix serves no tool ${JSON.stringify(call.name)}: it is a task for black-box coding agents`,
      }),
      prepareWorkspace: async (workspace) => {
        // A directory of its own in the workspace: the run's files (task, answer, the agent's home) stay out of the diff.
        const dir = join(workspace, 'repo');
        await layOutSnapshot(data.repo, this.root, dir);
        // Taken before the agent's own git repository exists, so its .git never enters the diff either way.
        const baseline = await Baseline.take(dir);
        this.baselines.set(dir, baseline);
        prepared = dir;
        await git(['init', '--quiet'], { cwd: dir });
        await git(['add', '--all'], { cwd: dir, gitDir: `${dir}/.git`, workTree: dir });
        await git(['commit', '--quiet', '--no-verify', '-m', 'snapshot'], { cwd: dir, gitDir: `${dir}/.git`, workTree: dir });
        return { workdir: dir, ...(data.setup ? { setup: argvOf(data.setup) } : {}) };
      },
      close: async () => {
        if (prepared === null) return;
        await this.baselines.get(prepared)?.dispose();
        this.baselines.delete(prepared);
      },
    };
  }

  /** A transcript says nothing of a repository: repo-fix is judged by verifyWork. */
  verify(task: EnvTask): VerifyResult {
    throw new RepoFixVerifyError(
      `repo-fix task ${task.id}: scored from the agent's workspace (a black-box agent's diff), not from a transcript`,
    );
  }

  /** The agent's diff (from the workspace it left) against the held-back tests; see the file header. */
  async verifyWork(task: EnvTask, _transcript: Transcript, work: AgentWork): Promise<VerifyResult> {
    const data = repoFixData(task.id, task.data);
    const baseline = work.workspace ? this.baselineOf(work.workspace) : undefined;
    if (!baseline)
      throw new RepoFixVerifyError(
        `repo-fix task ${task.id}: no prepared workspace to take the agent's diff from (repo-fix needs a black-box agent)`,
      );
    if (!(await baseline.intact()))
      return { outcomeReward: 0, success: false, detail: 'the agent removed or replaced its checkout (repo/ is no longer a directory)' };
    const diff = await baseline.diff();
    this.sandbox ??= this.makeSandbox(this.config.sandbox);
    return runHeldBackTests(task, data, diff, {
      root: this.root,
      sandbox: await this.sandbox,
      testTimeoutMs: this.config.testTimeoutMs,
      maxDiffBytes: this.config.maxDiffBytes,
    });
  }

  /** How long verify may take: the task's test wall clock and a margin for copying and diffing. */
  verifyTimeoutMs(task: EnvTask): number {
    const t = (task.data.test as { timeoutMs?: unknown } | undefined)?.timeoutMs;
    return (typeof t === 'number' ? t : this.config.testTimeoutMs) + 60_000;
  }

  /** The opening messages and, for a task with a reference fix, that fix as the answer. */
  demonstration(task: EnvTask): ChatMessage[] {
    const data = repoFixData(task.id, task.data);
    if (!data.solution) throw new RepoFixTaskError(`repo-fix task ${task.id}: no data.solution to demonstrate`);
    const fix = Object.entries(data.solution.files).map(([path, text]) => `${path}:\n${text}`);
    return [...task.messages.map((m) => ({ ...m })), { role: 'assistant', content: fix.join('\n') }];
  }

  /** The baseline of the prepared directory `workspace` is, or holds. */
  private baselineOf(workspace: string): Baseline | undefined {
    for (const [dir, b] of this.baselines) if (dir === workspace || dir.startsWith(`${workspace}/`)) return b;
    return undefined;
  }
}
