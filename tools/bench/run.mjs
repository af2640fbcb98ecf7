#!/usr/bin/env node
// `npm run bench -- <suite>`: runs tools/bench/suites/<suite>.ts. Each suite starts the
// infrastructure it needs (and stops it), prints a readable table, then one JSON object as
// the last line of stdout.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const suitesDir = join(root, 'tools', 'bench', 'suites');
const available = readdirSync(suitesDir)
  .filter((f) => f.endsWith('.ts') && !f.endsWith('.spec.ts'))
  .map((f) => f.replace(/\.ts$/, ''));
const [suite, ...rest] = process.argv.slice(2);
if (!suite || !available.includes(suite)) {
  console.error(`usage: npm run bench -- <suite> [args]\navailable suites: ${available.join(', ')}`);
  process.exit(2);
}
const file = join(suitesDir, `${suite}.ts`);
if (!existsSync(file)) process.exit(2);
const r = spawnSync('npx', ['tsx', file, ...rest], { cwd: root, stdio: 'inherit' });
process.exit(r.status ?? 1);
