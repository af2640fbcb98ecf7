/**
 * The agent's diff: its copy of the repository is committed as it started into a git directory
 * that lives outside the copy (the agent never sees it), and after the run everything it changed
 * (edits, new files, deletions, modes, binary files) is the diff of the tree against that commit.
 * `.gitignore` files of the tree apply, and so do a few build leftovers that no fix consists of.
 */
import { lstat, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { git, gitOk } from './git';

/** Leftovers of running the code (bytecode caches, test runners' caches): never part of a diff. */
const EXCLUDED = ['__pycache__/', '*.pyc', '.pytest_cache/', '.mypy_cache/', '.ruff_cache/', 'node_modules/.cache/'];

export class Baseline {
  private constructor(
    private readonly gitDir: string,
    private readonly tree: string,
  ) {}

  /** Commits `tree` as it is now into a new git directory outside it. */
  static async take(tree: string): Promise<Baseline> {
    const home = await mkdtemp(join(tmpdir(), 'anvil-repo-fix-git-'));
    const gitDir = join(home, 'git');
    const b = new Baseline(gitDir, tree);
    try {
      await gitOk(['init', '--quiet', '--bare', gitDir], { cwd: home }, 'baseline');
      await writeFile(join(gitDir, 'info', 'exclude'), `${EXCLUDED.join('\n')}\n`);
      await gitOk(['config', 'core.bare', 'false'], b.opts(), 'baseline');
      await gitOk(['add', '--all', '--force', '.'], b.opts(), 'baseline');
      // --force above: a snapshot's own ignored files are part of what the agent starts from.
      await gitOk(['commit', '--quiet', '--allow-empty', '--no-verify', '-m', 'baseline'], b.opts(), 'baseline');
    } catch (err) {
      await rm(home, { recursive: true, force: true });
      throw err;
    }
    return b;
  }

  private opts() {
    return { cwd: this.tree, gitDir: this.gitDir, workTree: this.tree };
  }

  /** Whether the tree is still a plain directory: an agent may have replaced its checkout with a symlink out of it. */
  async intact(): Promise<boolean> {
    try {
      return (await lstat(this.tree)).isDirectory();
    } catch {
      return false;
    }
  }

  /** Everything changed in the tree since the baseline, as a binary-safe unified diff ('' for nothing); check intact() first. */
  async diff(): Promise<string> {
    await gitOk(['add', '--all', '.'], this.opts(), "the agent's diff");
    const out = await gitOk(
      ['diff', '--cached', '--binary', '--no-color', '--no-ext-diff', '--no-textconv', 'HEAD'],
      this.opts(),
      "the agent's diff",
    );
    return out.toString('utf8');
  }

  /** Removes the git directory (the tree is the caller's). */
  dispose(): Promise<void> {
    return rm(join(this.gitDir, '..'), { recursive: true, force: true });
  }
}

/** Applies `diff` to the tree at `dir` (paths outside it, or through its symlinks, refused by git); the reason when it does not apply. */
export async function applyDiff(dir: string, diff: string): Promise<string | null> {
  if (diff.trim() === '') return null;
  const home = await mkdtemp(join(tmpdir(), 'anvil-repo-fix-apply-'));
  try {
    await gitOk(['init', '--quiet', '--bare', join(home, 'git')], { cwd: home }, 'apply');
    const r = await git(['apply', '--binary', '--whitespace=nowarn', '-'], {
      cwd: dir,
      gitDir: join(home, 'git'),
      workTree: dir,
      input: diff,
    });
    return r.code === 0 ? null : r.stderr.trim().slice(0, 1000) || `git apply exited ${r.code}`;
  } finally {
    await rm(home, { recursive: true, force: true });
  }
}
