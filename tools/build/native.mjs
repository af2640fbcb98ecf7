#!/usr/bin/env node
// Builds the native engine (libs/engine) with node-gyp. Run by `npm install` (postinstall) and
// by `npm run build:native` (--force).
//
// - Offline: node-gyp gets --nodedir pointing at the running Node's own headers
//   (<prefix>/include/node), so it never downloads a header tarball.
// - OpenBLAS: when cblas.h / libopenblas are missing and we are root on a Debian-like system,
//   installs libopenblas-dev with apt-get (apt-get update first); otherwise fails and says how.
// - Skips the build when the binary is up to date with its sources (a stamp holds a hash of the
//   sources, the Node version and the architecture), unless --force.
// - ANVIL_SKIP_NATIVE=1 skips everything (for machines that never load the engine).
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, writeFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureOpenBlas, findNodeDir, makeLog } from './native-common.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const engineDir = join(root, 'libs/engine');
const binary = join(engineDir, 'build/Release/anvil_engine.node');
const stampFile = join(engineDir, 'build/.anvil-build-stamp');
const force = process.argv.includes('--force');
const require = createRequire(import.meta.url);

const { log, fail } = makeLog('build:native');

function sourceHash() {
  const h = createHash('sha256');
  const files = [join(engineDir, 'binding.gyp')];
  const nativeDir = join(engineDir, 'native');
  for (const f of readdirSync(nativeDir).sort()) {
    const p = join(nativeDir, f);
    if (statSync(p).isFile()) files.push(p);
  }
  for (const f of files) {
    h.update(f.slice(engineDir.length));
    h.update(readFileSync(f));
  }
  h.update(`${process.version} ${process.arch} ${process.platform}`);
  return h.digest('hex');
}

function main() {
  if (process.env.ANVIL_SKIP_NATIVE === '1') {
    log('ANVIL_SKIP_NATIVE=1: skipping the native engine build');
    return;
  }
  if (process.platform !== 'linux') log(`warning: only Linux is tested (this is ${process.platform})`);
  const hash = sourceHash();
  if (!force && existsSync(binary) && existsSync(stampFile) && readFileSync(stampFile, 'utf8').trim() === hash) {
    log(`up to date: ${binary} (use --force or npm run build:native to rebuild)`);
    return;
  }
  const blas = ensureOpenBlas();
  log(`OpenBLAS: ${blas.header}, ${blas.lib}`);
  const nodedir = findNodeDir();
  let gyp;
  try {
    gyp = require.resolve('node-gyp/bin/node-gyp.js', { paths: [root] });
  } catch {
    fail('node-gyp is not installed; run `npm install` first.');
  }
  const jobs = String(Math.max(1, cpus().length));
  log(`building with node-gyp (nodedir=${nodedir}, jobs=${jobs}) ...`);
  const t0 = Date.now();
  const r = spawnSync(process.execPath, [gyp, 'rebuild', `--nodedir=${nodedir}`, '--jobs', jobs], {
    cwd: engineDir,
    stdio: 'inherit',
    env: { ...process.env, npm_config_nodedir: nodedir },
  });
  if (r.status !== 0)
    fail(
      'node-gyp could not build libs/engine (see the compiler output above).\n' +
        '  Needs: a C++17 compiler (g++ >= 9), make, python3, libopenblas-dev, the Node headers.\n' +
        '  Fix the cause and run `npm run build:native`.',
    );
  // Load it once in a child process: catches a missing shared library at build time, not at first use.
  const check = spawnSync(process.execPath, ['-e', `const m = require(${JSON.stringify(binary)}); console.log(JSON.stringify(m.info()))`], {
    encoding: 'utf8',
  });
  if (check.status !== 0) fail(`the built addon does not load:\n${check.stderr}`);
  writeFileSync(stampFile, hash + '\n');
  log(`built ${binary} in ${((Date.now() - t0) / 1000).toFixed(1)} s: ${check.stdout.trim()}`);
}

main();
