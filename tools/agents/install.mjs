#!/usr/bin/env node
// Installs the third-party agent CLIs Anvil runs as black-box agents, at pinned versions, into
// .cache/agents (npm, like the Python agents' venv in .cache/python-agents):
//   codex        @openai/codex                 Codex CLI (speaks only the Responses API)
//   claude-code  @anthropic-ai/claude-code     Claude Code (the Messages API); 2.1.197 is the newest
//                                              release whose engines allow Node 20 (2.1.198 on need Node 22)
// Both ship native binaries through per-platform optional dependencies. Idempotent: a CLI that
// already answers --version with its pinned version is left as it is.
//   node tools/agents/install.mjs [codex] [claude-code]     (default: both)
// Prints the path of each CLI. Used by tools/agents/codex.sh and claude-code.sh, and by
// test/e2e/agent-clis.e2e.spec.ts before it runs them.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const AGENTS_DIR = process.env.ANVIL_AGENTS_DIR ?? join(root, '.cache', 'agents');

export const AGENTS = {
  codex: { pkg: '@openai/codex', version: '0.171.0', bin: 'codex', reports: 'codex-cli 0.171.0' },
  'claude-code': { pkg: '@anthropic-ai/claude-code', version: '2.1.197', bin: 'claude', reports: '2.1.197 (Claude Code)' },
};

const binPath = (name) => join(AGENTS_DIR, 'node_modules', '.bin', AGENTS[name].bin);

function reportedVersion(name) {
  if (!existsSync(binPath(name))) return null;
  const r = spawnSync(binPath(name), ['--version'], { encoding: 'utf8', env: { ...process.env, HOME: AGENTS_DIR } });
  return r.status === 0 ? r.stdout.trim() : null;
}

function run(cmd, args, cwd) {
  const r = spawnSync(cmd, args, { cwd, stdio: ['ignore', 'inherit', 'inherit'] });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (exit ${r.status ?? r.signal})`);
}

export function install(names = Object.keys(AGENTS)) {
  const missing = names.filter((n) => reportedVersion(n) !== AGENTS[n].reports);
  if (missing.length > 0) {
    mkdirSync(AGENTS_DIR, { recursive: true });
    // Its own package.json, so the CLIs never land in (or read) the workspace's dependency tree.
    const deps = Object.fromEntries(Object.values(AGENTS).map((a) => [a.pkg, a.version]));
    writeFileSync(join(AGENTS_DIR, 'package.json'), `${JSON.stringify({ private: true, dependencies: deps }, null, 2)}\n`);
    run(
      'npm',
      ['install', '--no-audit', '--no-fund', '--loglevel=error', ...missing.map((n) => `${AGENTS[n].pkg}@${AGENTS[n].version}`)],
      AGENTS_DIR,
    );
    // Claude Code's postinstall puts the platform's binary in place of a stub; where install
    // scripts are not run, its documented fallback is to run that script by hand.
    if (missing.includes('claude-code') && reportedVersion('claude-code') !== AGENTS['claude-code'].reports)
      run('node', ['install.cjs'], join(AGENTS_DIR, 'node_modules', ...AGENTS['claude-code'].pkg.split('/')));
  }
  for (const n of names) {
    const got = reportedVersion(n);
    if (got !== AGENTS[n].reports) throw new Error(`${n}: ${binPath(n)} --version says ${JSON.stringify(got)}, not ${AGENTS[n].reports}`);
  }
  return Object.fromEntries(names.map((n) => [n, binPath(n)]));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const asked = process.argv.slice(2);
  const unknown = asked.filter((n) => !(n in AGENTS));
  if (unknown.length > 0) {
    console.error(`unknown agent CLI: ${unknown.join(', ')} (known: ${Object.keys(AGENTS).join(', ')})`);
    process.exit(2);
  }
  try {
    for (const [name, path] of Object.entries(install(asked.length > 0 ? asked : undefined))) console.log(`${name}: ${path}`);
  } catch (err) {
    console.error(`install failed: ${err.message}`);
    process.exit(1);
  }
}
