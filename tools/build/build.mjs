#!/usr/bin/env node
// `npm run build`: compiles every app and lib with tsc (real decorator metadata for Nest and
// TypeORM) into dist/, then rewrites the @anvil/* path aliases to relative requires so the
// built services run with plain `node dist/apps/<app>/src/main.js`.
import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const run = (cmd, args) => {
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) {
    console.error(`build: ${cmd} ${args.join(' ')} failed (exit ${r.status})`);
    process.exit(r.status ?? 1);
  }
};

rmSync(join(root, 'dist'), { recursive: true, force: true });
run('npx', ['tsc', '-p', 'tsconfig.build.json']);
run('npx', ['tsc-alias', '-p', 'tsconfig.build.json']);
console.log('build: dist/ ready');
