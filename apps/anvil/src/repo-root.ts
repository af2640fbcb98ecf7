import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** The repository's root (where nx.json is): the same from the sources (tsx) and from dist/. */
export function findRepoRoot(from = __dirname): string {
  for (let dir = from; ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'nx.json')) && existsSync(join(dir, 'package.json'))) return dir;
    if (dirname(dir) === dir) throw new Error(`no repository root (nx.json) above ${from}`);
  }
}

export const repoRoot = findRepoRoot();
