import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Environment, EnvTask, Episode } from '../types';
import { RepoFixConfigError, RepoFixEnvironment, RepoFixVerifyError } from './index';

/**
 * The repo-fix environment as a rollout uses it, with the real local sandbox (bubblewrap) for the
 * held-back tests: the agent's copy is prepared, "the agent" edits it (here, the test itself),
 * and the verifier scores the diff in a fresh sandbox.
 */
const work = mkdtempSync(join(tmpdir(), 'anvil-repo-fix-env-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const MODULE = 'def double(x):\n    return x + x\n\n\ndef half(x):\n    return x * 2\n';
const TESTS = [
  'import unittest',
  'from calc import double, half',
  '',
  'class T(unittest.TestCase):',
  '    def test_double(self):',
  '        self.assertEqual(double(3), 6)',
  '    def test_half(self):',
  '        self.assertEqual(half(8), 4)',
  '    def test_half_zero(self):',
  '        self.assertEqual(half(0), 0)',
  '',
].join('\n');

const task = (data: Record<string, unknown>, id = 'half'): EnvTask => ({
  id,
  env: 'repo-fix',
  messages: [{ role: 'user', content: 'half(8) should be 4. Fix it.' }],
  tools: [],
  split: 'train',
  difficulty: 1,
  data,
});
const pythonTest = { command: 'python3 -m unittest -v test_calc', format: 'unittest', files: { 'test_calc.py': TESTS } };

/** A snapshot three ways under `work`: a directory, a tarball of it, and a git repository whose tag v1 is it (a later commit is not). */
function snapshots(): void {
  if (existsSync(join(work, 'src-git'))) return;
  const src = join(work, 'src-repo');
  mkdirSync(src, { recursive: true });
  writeFileSync(join(src, 'calc.py'), MODULE);
  execFileSync('tar', ['-czf', join(work, 'src.tar.gz'), '-C', src, '.']);
  const history = join(work, 'src-git');
  mkdirSync(history);
  writeFileSync(join(history, 'calc.py'), MODULE);
  const commit = 'git -c user.name=t -c user.email=t@t commit -q';
  execFileSync(
    'sh',
    ['-c', `git init -q && git add -A && ${commit} -m one && git tag v1 && echo "# later" >> calc.py && ${commit} -am two`],
    {
      cwd: history,
    },
  );
}

/** Prepares an agent workspace for `t`, lets `act` change the checkout, scores it; always closes the episode. */
async function rollout(env: RepoFixEnvironment, t: EnvTask, act: (checkout: string) => void) {
  const workspace = mkdtempSync(join(work, 'agent-'));
  const episode: Episode = env.reset(t, { rolloutId: 'r', seed: 1 });
  try {
    const plan = await episode.prepareWorkspace!(workspace);
    act(plan.workdir);
    return { plan, result: await env.verifyWork!(t, { messages: [], finalAnswer: null }, { workspace }) };
  } finally {
    await episode.close?.();
  }
}

describe('repo-fix environment', () => {
  const env = new RepoFixEnvironment({ root: work, testTimeoutMs: 30_000 });

  it('scores the held-back tests on the agent diff, with partial credit per test', async () => {
    const t = task({ repo: { files: { 'calc.py': MODULE } }, test: pythonTest });
    const untouched = await rollout(env, t, () => undefined);
    expect(untouched.result).toMatchObject({ outcomeReward: 2 / 3, success: false });
    expect(untouched.result.detail).toContain('test_half (failed)');
    const fixed = await rollout(env, t, (dir) => writeFileSync(join(dir, 'calc.py'), MODULE.replace('x * 2', 'x // 2')));
    expect(fixed.result).toMatchObject({ outcomeReward: 1, success: true, detail: '3/3 held-back tests pass' });
    // The agent's copy sits in a directory of its own, as a git repository of its own, without the held-back tests.
    expect(fixed.plan.workdir.endsWith('/repo')).toBe(true);
  });

  it('runs the held-back tests, not the agent own: a test file it wrote in their place is replaced', async () => {
    const t = task({ repo: { files: { 'calc.py': MODULE } }, test: pythonTest });
    const cheat = await rollout(env, t, (dir) => {
      expect(existsSync(join(dir, '.git'))).toBe(true);
      expect(existsSync(join(dir, 'test_calc.py'))).toBe(false);
      writeFileSync(join(dir, 'test_calc.py'), 'import unittest\nclass T(unittest.TestCase):\n    def test_half(self):\n        pass\n');
    });
    expect(cheat.result.outcomeReward).toBeCloseTo(2 / 3);
  });

  it('takes deletions, new files and renames into the diff, but no bytecode caches', async () => {
    const t = task({
      repo: { files: { 'calc.py': 'from impl import double, half\n', 'impl.py': MODULE, 'obsolete.txt': 'x\n' } },
      test: { ...pythonTest, names: ['test_double', 'test_half', 'test_half_zero'] },
    });
    const r = await rollout(env, t, (dir) => {
      unlinkSync(join(dir, 'obsolete.txt'));
      writeFileSync(join(dir, 'impl2.py'), MODULE.replace('x * 2', 'x // 2'));
      writeFileSync(join(dir, 'calc.py'), 'from impl2 import double, half\n');
      mkdirSync(join(dir, '__pycache__'));
      writeFileSync(join(dir, '__pycache__', 'junk.pyc'), Buffer.alloc(64 << 20));
    });
    expect(r.result).toMatchObject({ outcomeReward: 1, success: true });
  });

  it('takes the snapshot from a directory, a tarball or a git ref (paths relative to root), with a setup in both sandboxes', async () => {
    snapshots();
    // The setup leaves a marker the held-back tests need: it ran in the verifier's sandbox too.
    const setup = 'echo ok > built.txt';
    const test = { ...pythonTest, files: { 'test_calc.py': `${TESTS}\nassert open("built.txt").read() == "ok\\n"\n` } };
    for (const repo of [{ dir: 'src-repo' }, { tarball: 'src.tar.gz' }, { git: 'src-git', ref: 'v1' }]) {
      const r = await rollout(env, task({ repo, setup, test }), (dir) => {
        expect(readFileSync(join(dir, 'calc.py'), 'utf8')).toBe(MODULE);
        writeFileSync(join(dir, 'calc.py'), MODULE.replace('x * 2', 'x // 2'));
      });
      expect(r.plan.setup, JSON.stringify(repo)).toEqual(['sh', '-c', setup]);
      expect(r.result, JSON.stringify(repo)).toMatchObject({ outcomeReward: 1, success: true });
    }
  });

  it('names the task for what is missing before a run: snapshot, tarball, repository, ref, test dir, bad data', async () => {
    snapshots();
    const problems = (data: Record<string, unknown>) => env.checkTask!(task(data, 'the-task'));
    expect(problems({ repo: { dir: 'nope' }, test: pythonTest })).toEqual([
      `repo-fix task the-task: data.repo.dir ${join(work, 'nope')} is not a directory`,
    ]);
    expect(problems({ repo: { tarball: 'nope.tgz' }, test: { ...pythonTest, dir: 'gone' } })).toEqual([
      `repo-fix task the-task: data.repo.tarball ${join(work, 'nope.tgz')} does not exist`,
      `repo-fix task the-task: data.test.dir ${join(work, 'gone')} is not a directory`,
    ]);
    expect(problems({ repo: { git: 'src-git', ref: 'no-such-tag' }, test: pythonTest })).toEqual([
      `repo-fix task the-task: data.repo.ref "no-such-tag" is not a commit of ${join(work, 'src-git')}`,
    ]);
    expect(problems({ repo: { files: { '../escape.py': '' } }, test: { command: 'x' } })).toEqual([
      'repo-fix task the-task: data.repo.files.../escape.py: must be a relative path inside the tree (no ..); data.test: needs the held-back tests: files and/or dir',
    ]);
    expect(problems({ repo: { dir: 'a', git: 'b' }, test: pythonTest })).toEqual([
      'repo-fix task the-task: data.repo: exactly one of files, dir, tarball or git (got dir, git); data.repo.ref: git and ref go together',
    ]);
    expect(problems({ repo: { files: { 'a.py': '' } }, test: pythonTest })).toEqual([]);
  });

  it('a test command that outruns its wall clock, or a setup that fails, is an error naming the task', async () => {
    const hang = task({ repo: { files: { 'calc.py': MODULE } }, test: { ...pythonTest, command: 'sleep 600', timeoutMs: 1500 } }, 'hangs');
    const t0 = Date.now();
    await expect(rollout(env, hang, () => undefined)).rejects.toThrow(
      new RepoFixVerifyError('repo-fix task hangs: the test command `sh -c sleep 600` did not finish within 1500 ms (data.test.timeoutMs)'),
    );
    expect(Date.now() - t0).toBeLessThan(20_000);
    const broken = task({ repo: { files: { 'calc.py': MODULE } }, setup: 'exit 3', test: pythonTest }, 'bad-setup');
    await expect(rollout(env, broken, () => undefined)).rejects.toThrow(
      /^repo-fix task bad-setup: the setup before the held-back tests failed/,
    );
  });

  it('a diff over maxDiffBytes scores 0 without running the tests; a symlink out of the tree is not followed', async () => {
    const small = new RepoFixEnvironment({ root: work, maxDiffBytes: 1000 });
    const t = task({ repo: { files: { 'calc.py': MODULE } }, test: pythonTest });
    const big = await rollout(small, t, (dir) => writeFileSync(join(dir, 'blob.txt'), 'x'.repeat(5000)));
    expect(big.result).toMatchObject({ outcomeReward: 0, success: false });
    expect(big.result.detail).toMatch(/over maxDiffBytes 1000: not applied/);
    const link = await rollout(env, t, (dir) => symlinkSync('/etc/passwd', join(dir, 'passwd')));
    expect(link.result.outcomeReward).toBeCloseTo(2 / 3);
    // The checkout itself swapped for a link to the host's root: nothing is read through it.
    const swapped = await rollout(env, t, (dir) => {
      rmSync(dir, { recursive: true });
      symlinkSync('/', dir);
    });
    expect(swapped.result).toMatchObject({ outcomeReward: 0, success: false });
    expect(swapped.result.detail).toMatch(/removed or replaced its checkout/);
  });

  it('refuses a workspace it did not prepare, and bad config, by name', async () => {
    const t = task({ repo: { files: { 'calc.py': MODULE } }, test: pythonTest });
    await expect(env.verifyWork!(t, { messages: [], finalAnswer: null }, { workspace: '/nowhere' })).rejects.toThrow(
      /no prepared workspace/,
    );
    expect(() => (env as Environment).verify(t, { messages: [], finalAnswer: null })).toThrow(/scored from the agent's workspace/);
    expect(() => new RepoFixEnvironment({ levels: { min: 3, max: 1 }, sandbox: 'docker' })).toThrow(RepoFixConfigError);
    expect(() => new RepoFixEnvironment({ levels: { min: 3, max: 1 } })).toThrow(/levels: min must be <= max/);
  });

  it('generates the built-in set and demonstrates a task by its reference fix', () => {
    const gen = new RepoFixEnvironment({ languages: ['python'], levels: 2 });
    const [t] = gen.generate({ seed: 1, count: 1, split: 'eval' });
    expect(t).toMatchObject({ env: 'repo-fix', split: 'eval', difficulty: 2 });
    const demo = gen.demonstration(t);
    expect(demo.slice(0, -1)).toEqual(t.messages);
    expect(demo.at(-1)!.content).toContain('app/toolbox.py:\n');
    expect(gen.limits()).toEqual({ maxSteps: 30 });
  });
});
