#!/usr/bin/env node
// `npm run lint`: the Nx module-boundary rule silently skips itself when no project graph is
// cached, so compute the graph first (offline, no daemon), then run ESLint on the workspace.
import { spawnSync } from 'node:child_process';

const env = { ...process.env, NX_DAEMON: 'false', NX_NO_CLOUD: 'true' };
const graph = spawnSync('npx', ['nx', 'show', 'projects'], { env, stdio: ['ignore', 'ignore', 'inherit'] });
if (graph.status !== 0) process.exit(graph.status ?? 1);
const lint = spawnSync('npx', ['eslint', '--max-warnings=0', ...(process.argv.slice(2).length ? process.argv.slice(2) : ['.'])], {
  env,
  stdio: 'inherit',
});
process.exit(lint.status ?? 1);
