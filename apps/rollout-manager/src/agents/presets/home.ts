import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * The Anvil checkout the presets belong to (where nx.json is, above this file, from the sources or
 * from dist/): its tools/agents holds their scripts and its .cache/agents their installs, whatever
 * directory the manager was started in.
 */
export function anvilHome(from = __dirname): string {
  for (let dir = from; ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'nx.json')) && existsSync(join(dir, 'tools', 'agents'))) return dir;
    if (dirname(dir) === dir) throw new Error(`the harness presets' scripts (tools/agents) are not above ${from}`);
  }
}
