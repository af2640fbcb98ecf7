#!/usr/bin/env node
// `docker compose config` for docker-compose.yml, on machines with or without Docker Compose.
//
// CLI
//   node tools/infra/compose.mjs config [-f FILE] [--format json|yaml] [--services]   resolved config on stdout
//                                             (exit status of the validator: non-zero when invalid)
//   node tools/infra/compose.mjs tool                                       which validator is used
//
// API
//   await composeConfig({ args, file, env }) -> { tool, status, stdout, stderr }
//     args: extra `config` args (['--format', 'json'] or ['--services']); file: default
//     <repo>/docker-compose.yml; env: the environment to interpolate from (default process.env).
//
// Validator: the `docker compose` v2 plugin when the docker CLI has it; otherwise
// tools/infra/compose-config, a small Go program on compose-spec/compose-go (the loader the
// Compose v2 CLI is built on: same schema validation, interpolation, `${VAR:?}` errors and
// consistency checks), built once with the machine's Go toolchain into .cache/compose-config/.
// Neither needs a Docker engine.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { cacheDir, infraDir, isMain, log, repoRoot, run, which, withLock } from './util.mjs';

const TAG = 'compose';
const srcDir = join(infraDir, 'compose-config');

function hasComposePlugin() {
  if (!which('docker')) return false;
  return run('docker', ['compose', 'version'], { allowFail: true, timeoutMs: 30_000 }).status === 0;
}

/** Builds (once per source hash) and returns the path of the compose-config binary. */
export async function buildComposeConfig() {
  const hash = createHash('sha256');
  for (const f of ['main.go', 'go.mod', 'go.sum']) hash.update(readFileSync(join(srcDir, f)));
  const dir = join(cacheDir, 'compose-config', hash.digest('hex').slice(0, 16));
  const bin = join(dir, 'compose-config');
  if (existsSync(bin)) return bin;
  return withLock(
    `${dir}.lock`,
    async () => {
      if (existsSync(bin)) return bin;
      if (!which('go')) throw new Error('no `docker compose` plugin and no Go toolchain to build tools/infra/compose-config');
      mkdirSync(dir, { recursive: true });
      const tmp = `${bin}.tmp-${process.pid}`;
      log(TAG, 'building tools/infra/compose-config (compose-spec/compose-go) with go build');
      const env = { ...process.env, GOTOOLCHAIN: 'local', GOFLAGS: '-mod=readonly', CGO_ENABLED: '0' };
      try {
        run('go', ['build', '-trimpath', '-o', tmp, '.'], { cwd: srcDir, env, timeoutMs: 10 * 60_000 });
        renameSync(tmp, bin);
      } finally {
        rmSync(tmp, { force: true });
      }
      return bin;
    },
    { tag: TAG },
  );
}

export async function composeTool() {
  return hasComposePlugin() ? 'docker compose' : 'compose-go';
}

export async function composeConfig({ args = [], file = join(repoRoot, 'docker-compose.yml'), env = process.env } = {}) {
  let r;
  let tool;
  if (hasComposePlugin()) {
    tool = 'docker compose';
    r = run('docker', ['compose', '-f', file, 'config', ...args], { allowFail: true, env, timeoutMs: 120_000 });
  } else {
    tool = 'compose-go';
    const bin = await buildComposeConfig();
    r = run(bin, ['-f', file, ...args], { allowFail: true, env, timeoutMs: 120_000 });
  }
  return { tool, status: r.status, stdout: r.stdout, stderr: r.stderr };
}

async function main(argv) {
  switch (argv[0]) {
    case 'config': {
      const args = argv.slice(1);
      const i = args.indexOf('-f');
      const file = i >= 0 ? resolve(args[i + 1] ?? '') : undefined;
      if (i >= 0) args.splice(i, 2);
      const r = await composeConfig({ args, file });
      process.stdout.write(r.stdout);
      process.stderr.write(r.stderr);
      return r.status;
    }
    case 'tool':
      console.log(await composeTool());
      return 0;
    default:
      console.error('usage: node tools/infra/compose.mjs config [-f FILE] [--format json|yaml] [--services] | tool');
      return 2;
  }
}

if (isMain(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e) => {
      console.error(`[compose] ${e.message}`);
      process.exit(1);
    },
  );
}
