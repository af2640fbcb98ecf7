#!/usr/bin/env node
// The `anvil` command. Runs the CLI from its TypeScript sources through tsx, so a checkout needs
// no build step and never runs stale code; `npm run build` also compiles it into
// dist/apps/anvil/src/main.js for a deployment without tsx.
const { join } = require('node:path');

const root = join(__dirname, '..', '..', '..');
// The @anvil/* path aliases come from the repository's tsconfig, wherever the command is run from.
process.env.TSX_TSCONFIG_PATH ??= join(root, 'tsconfig.json');
// tsx's loader, as `node --import tsx` would load it: its CommonJS and ESM hooks both (the services
// load some modules with a dynamic import(), the ESM loader's path).
const { pathToFileURL } = require('node:url');
import(pathToFileURL(require.resolve('tsx')).href).then(() =>
  require(join(root, 'apps', 'anvil', 'src', 'main.ts')).runCli(process.argv.slice(2)),
);
