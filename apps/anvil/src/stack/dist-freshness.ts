/**
 * The services run from dist/ (as in production). `stack up` rebuilds it when a source file of an
 * app or library is newer than the oldest built entry point, so a run never starts services from a
 * build that predates the working tree.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { APPS } from '../config/service-settings';
import { repoRoot } from '../repo-root';
import { builtMain } from './service-process';

function newestSource(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== 'node_modules' && entry.name !== 'build' && entry.name !== 'build-cuda')
        newest = Math.max(newest, newestSource(p));
    } else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.spec.ts')) newest = Math.max(newest, statSync(p).mtimeMs);
  }
  return newest;
}

/** Why dist/ needs a build, or null when it is current. */
export function staleDist(): string | null {
  const mains = APPS.map((a) => builtMain(a));
  const missing = mains.find((m) => !existsSync(m));
  if (missing) return `${missing} is missing`;
  const built = Math.min(...mains.map((m) => statSync(m).mtimeMs));
  const sources = Math.max(newestSource(join(repoRoot, 'apps')), newestSource(join(repoRoot, 'libs')));
  return sources > built ? 'sources changed since the last build' : null;
}

export function build(): void {
  const r = spawnSync(process.execPath, [join(repoRoot, 'tools', 'build', 'build.mjs')], {
    cwd: repoRoot,
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  if (r.status !== 0) throw new Error(`npm run build failed (exit ${r.status})`);
}
