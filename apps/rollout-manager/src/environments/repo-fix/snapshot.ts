/**
 * Lays a task's repository snapshot into an empty directory: inline files, a copy of a
 * directory, a tarball extracted, or a git ref exported (`git archive`, so no history and no
 * .git of the source comes along). The same function makes the agent's copy and the verifier's
 * fresh one, so both start from the same tree.
 */
import { spawn, spawnSync } from 'node:child_process';
import { cp, mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { gitEnv, gitOk, SAFE_CONFIG } from './git';
import { resolveIn, type RepoSnapshot } from './task-data';

export class SnapshotError extends Error {
  override readonly name = 'SnapshotError';
}

/** Writes `files` (relative paths, checked by the task schema) under `dir`, replacing what is there. */
export async function writeFiles(dir: string, files: Record<string, string>): Promise<void> {
  for (const [path, text] of Object.entries(files)) {
    const target = join(dir, path);
    await mkdir(dirname(target), { recursive: true });
    await writeFile(target, text);
  }
}

function tarExtract(file: string | null, into: string, input?: Buffer): Promise<void> {
  return new Promise((resolveTar, reject) => {
    // GNU tar refuses members with `..` and strips a leading `/`; no owners from the archive.
    const args = ['-x', '--no-same-owner', '--no-same-permissions', '-C', into, '-f', file ?? '-'];
    const child = spawn('tar', args, { stdio: ['pipe', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString('utf8')));
    child.on('error', (e) => reject(new SnapshotError(`tar: ${e.message}`)));
    child.on('close', (code) =>
      code === 0
        ? resolveTar()
        : reject(new SnapshotError(`tar -x ${file ?? '(git archive)'} exited ${code}: ${err.trim().slice(0, 500)}`)),
    );
    child.stdin.on('error', () => undefined);
    child.stdin.end(input ?? '');
  });
}

/** Fills the empty directory `into` with the snapshot (paths relative to `root`). */
export async function layOutSnapshot(repo: RepoSnapshot, root: string, into: string): Promise<void> {
  await mkdir(into, { recursive: true });
  if ('files' in repo) return writeFiles(into, repo.files);
  if ('dir' in repo) {
    // Symlinks are copied as links, never followed out of the snapshot.
    await cp(resolveIn(root, repo.dir), into, { recursive: true, verbatimSymlinks: true, force: true });
    return;
  }
  if ('tarball' in repo) return tarExtract(resolveIn(root, repo.tarball), into);
  const source = resolveIn(root, repo.git);
  const archive = await gitOk(['archive', '--format=tar', repo.ref], { cwd: source }, `data.repo.git ${source} at ${repo.ref}`);
  return tarExtract(null, into, archive);
}

/** Whether `ref` names a commit of the repository at `repoDir` (a problem sentence, or null); synchronous, for checks before a run. */
export function gitRefProblem(repoDir: string, ref: string): string | null {
  const r = spawnSync('git', [...SAFE_CONFIG, 'rev-parse', '--verify', '--quiet', `${ref}^{commit}`], {
    cwd: repoDir,
    env: gitEnv({}),
    stdio: 'ignore',
  });
  return r.status === 0 ? null : `data.repo.ref ${JSON.stringify(ref)} is not a commit of ${repoDir}`;
}
