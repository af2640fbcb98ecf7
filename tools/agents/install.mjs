#!/usr/bin/env node
// Installs the third-party agent CLIs Anvil runs as black-box agents, at their pinned versions, into
// .cache/agents: the harness presets' installer (`anvil agents install`, whose presets in
// apps/rollout-manager/src/agents/presets/ name each package and version), kept under this name for
// the scripts and tests that call it.
//   node tools/agents/install.mjs [NAME...]     (default: codex claude-code; `anvil agents list` names them all)
// Idempotent; prints the path of each agent's executable.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const names = process.argv.slice(2);
const r = spawnSync(
  process.execPath,
  [join(root, 'apps', 'anvil', 'bin', 'anvil.cjs'), 'agents', 'install', ...(names.length ? names : ['codex', 'claude-code'])],
  {
    stdio: 'inherit',
  },
);
process.exit(r.status ?? 1);
