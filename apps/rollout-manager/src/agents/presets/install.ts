/**
 * Installs harness presets from their registries at their pinned versions into the agents
 * directory (default <repo>/.cache/agents, or $ANVIL_AGENTS_DIR), where a local sandbox can
 * read them (readOnlyPaths): every file world-readable, interpreters from /usr only.
 *
 *   npm    one package.json of the agents' own (never the workspace's dependency tree),
 *          node_modules/.bin/<bin>; checked by the package's version and `<bin> --version`
 *   PyPI   a venv of its own per agent, built on /usr/bin/python3 (a venv on a Python a sandbox
 *          cannot see, e.g. under /root/.pyenv, does not start inside it), python/<name>/bin/<bin>;
 *          a marker file written last says which pin it holds
 *
 * Idempotent: an agent already installed at its pin is left as it is.
 */
import { spawn } from 'node:child_process';
import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { anvilHome } from './home';
import type { AgentPreset } from './types';

/** The Python every PyPI agent's venv is built on: one a sandbox sees (/usr is mounted in every sandbox). */
export const AGENTS_PYTHON = '/usr/bin/python3';
const MARKER = 'anvil-install.json';

export class PresetInstallError extends Error {
  override readonly name = 'PresetInstallError';
}

/** The agents directory: $ANVIL_AGENTS_DIR, else .cache/agents of the Anvil checkout. */
export function defaultAgentsDir(): string {
  return process.env.ANVIL_AGENTS_DIR ?? join(anvilHome(), '.cache', 'agents');
}

/** Where a preset's files live in the agents directory (what a sandbox must be able to read). */
export function installPlace(p: AgentPreset, agentsDir: string): string {
  return p.install.registry === 'npm' ? join(agentsDir, 'node_modules') : join(agentsDir, 'python', p.name);
}

/** The agent's executable. */
export function presetBin(p: AgentPreset, agentsDir: string): string {
  return p.install.registry === 'npm'
    ? join(agentsDir, 'node_modules', '.bin', p.install.bin)
    : join(agentsDir, 'python', p.name, 'bin', p.install.bin);
}

export interface InstallState {
  installed: boolean;
  /** The version there (null: none). */
  version: string | null;
  bin: string;
}

const executable = (path: string) => {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
};

function readJson(path: string): Record<string, unknown> | null {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  } catch {
    return null;
  }
}

/** Whether the preset is installed at its pin (files only: fast enough for a run's validation). */
export function installState(p: AgentPreset, agentsDir: string): InstallState {
  const bin = presetBin(p, agentsDir);
  const meta =
    p.install.registry === 'npm'
      ? readJson(join(agentsDir, 'node_modules', ...p.install.package.split('/'), 'package.json'))
      : readJson(join(installPlace(p, agentsDir), MARKER));
  const version = typeof meta?.version === 'string' ? meta.version : null;
  return { installed: version === p.install.version && executable(bin), version, bin };
}

function run(
  cmd: string,
  args: string[],
  cwd: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ code: number | null; out: string }> {
  return new Promise((resolveRun) => {
    const child = spawn(cmd, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const keep = (d: Buffer) => (out = (out + d.toString('utf8')).slice(-20_000));
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.on('error', (e) => resolveRun({ code: null, out: `${cmd}: ${e.message}` }));
    child.on('close', (code) => resolveRun({ code, out }));
  });
}

async function runOk(what: string, cmd: string, args: string[], cwd: string, env?: NodeJS.ProcessEnv): Promise<string> {
  const r = await run(cmd, args, cwd, env);
  if (r.code !== 0)
    throw new PresetInstallError(`${what}: ${cmd} ${args.join(' ')} failed (exit ${r.code}):\n${r.out.trim().slice(-3000)}`);
  return r.out;
}

async function installNpm(
  p: AgentPreset & { install: { registry: 'npm' } },
  agentsDir: string,
  all: readonly AgentPreset[],
): Promise<void> {
  await mkdir(agentsDir, { recursive: true });
  // The agents' own package.json: the npm agents already there at their pins, and this one, so npm keeps them.
  const kept = all.filter((o) => o.install.registry === 'npm' && (o === p || installState(o, agentsDir).installed));
  const deps = Object.fromEntries(kept.map((o) => [o.install.package, o.install.version]));
  await writeFile(join(agentsDir, 'package.json'), `${JSON.stringify({ private: true, dependencies: deps }, null, 2)}\n`);
  const spec = `${p.install.package}@${p.install.version}`;
  await runOk(p.name, 'npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', spec], agentsDir);
  if (!(await versionSays(p, agentsDir))) {
    // Claude Code's postinstall puts the platform's binary in place of a stub; where install scripts
    // did not run, its documented fallback is to run that script by hand.
    const pkgDir = join(agentsDir, 'node_modules', ...p.install.package.split('/'));
    if (existsSync(join(pkgDir, 'install.cjs'))) await runOk(p.name, process.execPath, ['install.cjs'], pkgDir);
  }
  if (!(await versionSays(p, agentsDir)))
    throw new PresetInstallError(`${p.name}: ${presetBin(p, agentsDir)} --version does not report ${p.install.version}`);
}

/** Whether `<bin> --version` names the pinned version (run with a scratch HOME, so no state lands in the cache). */
async function versionSays(p: AgentPreset, agentsDir: string): Promise<boolean> {
  const home = await mkdtemp(join(tmpdir(), 'anvil-agent-version-'));
  try {
    const r = await run(presetBin(p, agentsDir), ['--version'], home, { PATH: process.env.PATH, HOME: home, LANG: 'C.UTF-8' });
    return r.code === 0 && r.out.includes(p.install.version);
  } finally {
    await rm(home, { recursive: true, force: true });
  }
}

async function installPypi(p: AgentPreset & { install: { registry: 'pypi' } }, agentsDir: string, repoRoot: string): Promise<void> {
  const venv = installPlace(p, agentsDir);
  await rm(venv, { recursive: true, force: true });
  await mkdir(join(agentsDir, 'python'), { recursive: true });
  await runOk(p.name, AGENTS_PYTHON, ['-m', 'venv', venv], agentsDir);
  const pip = { ...process.env, PIP_DISABLE_PIP_VERSION_CHECK: '1', PIP_NO_INPUT: '1' };
  await runOk(p.name, join(venv, 'bin', 'pip'), ['install', '--quiet', `${p.install.package}==${p.install.version}`], agentsDir, pip);
  for (const f of p.install.files ?? []) await copyFile(join(repoRoot, f), join(venv, basename(f)));
  await runOk(p.name, join(venv, 'bin', 'python'), ['-c', `import ${p.install.module}`], agentsDir, { PATH: process.env.PATH, HOME: venv });
  if (!executable(presetBin(p, agentsDir)))
    throw new PresetInstallError(`${p.name}: ${presetBin(p, agentsDir)} is not there after pip install`);
  await writeFile(
    join(venv, MARKER),
    `${JSON.stringify({ package: p.install.package, version: p.install.version, python: AGENTS_PYTHON })}\n`,
  );
}

/**
 * Installs a preset at its pin unless it is there already; returns its state. `all` is every
 * preset (npm keeps the ones already installed). Files are created world-readable (umask 022),
 * whatever the caller's umask, so a sandbox's own uid can read them.
 */
export async function installPreset(
  p: AgentPreset,
  o: { agentsDir: string; all: readonly AgentPreset[] },
): Promise<InstallState & { changed: boolean }> {
  if (installState(p, o.agentsDir).installed) return { ...installState(p, o.agentsDir), changed: false };
  const umask = process.umask(0o022);
  try {
    if (p.install.registry === 'npm') await installNpm(p as AgentPreset & { install: { registry: 'npm' } }, o.agentsDir, o.all);
    else await installPypi(p as AgentPreset & { install: { registry: 'pypi' } }, o.agentsDir, anvilHome());
  } finally {
    process.umask(umask);
  }
  const state = installState(p, o.agentsDir);
  if (!state.installed) throw new PresetInstallError(`${p.name}: installed, but ${state.bin} at ${p.install.version} is still not there`);
  return { ...state, changed: true };
}
