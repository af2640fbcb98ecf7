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

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const engineDir = join(root, 'libs/engine');
const binary = join(engineDir, 'build/Release/anvil_engine.node');
const stampFile = join(engineDir, 'build/.anvil-build-stamp');
const force = process.argv.includes('--force');
const require = createRequire(import.meta.url);

function log(msg) {
  console.log(`[build:native] ${msg}`);
}

function fail(msg) {
  console.error(`\n[build:native] FAILED: ${msg}\n`);
  process.exit(1);
}

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

function multiarch() {
  const r = spawnSync('gcc', ['-print-multiarch'], { encoding: 'utf8' });
  return r.status === 0 && r.stdout.trim() ? r.stdout.trim() : `${process.arch === 'arm64' ? 'aarch64' : 'x86_64'}-linux-gnu`;
}

function findOpenBlas() {
  const ma = multiarch();
  const headers = [`/usr/include/${ma}/openblas-pthread/cblas.h`, `/usr/include/${ma}/cblas.h`, '/usr/include/openblas/cblas.h', '/usr/include/cblas.h'];
  // The header must be OpenBLAS's (it declares openblas_set_num_threads), not reference CBLAS.
  const header = headers.find((p) => existsSync(p) && readFileSync(p, 'utf8').includes('openblas_set_num_threads'));
  const libs = [`/usr/lib/${ma}/libopenblas.so`, '/usr/lib/libopenblas.so', '/usr/lib64/libopenblas.so', '/usr/local/lib/libopenblas.so'];
  const lib = libs.find((p) => existsSync(p));
  return header && lib ? { header, lib } : null;
}

function ensureOpenBlas() {
  let found = findOpenBlas();
  if (found) return found;
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const hasApt = spawnSync('sh', ['-c', 'command -v apt-get'], { encoding: 'utf8' }).status === 0;
  if (isRoot && hasApt) {
    log('OpenBLAS (cblas.h, libopenblas.so) not found: installing libopenblas-dev with apt-get');
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    let r = spawnSync('apt-get', ['update'], { stdio: 'inherit', env });
    if (r.status !== 0) fail('apt-get update failed; install libopenblas-dev by hand and rerun `npm run build:native`.');
    r = spawnSync('apt-get', ['install', '-y', '--no-install-recommends', 'libopenblas-dev'], { stdio: 'inherit', env });
    if (r.status !== 0) fail('apt-get install libopenblas-dev failed; install it by hand and rerun `npm run build:native`.');
    found = findOpenBlas();
    if (found) return found;
  }
  fail(
    'OpenBLAS development files (cblas.h declaring openblas_set_num_threads, and libopenblas.so) were not found.\n' +
      '  Debian/Ubuntu: sudo apt-get update && sudo apt-get install -y libopenblas-dev\n' +
      '  Fedora/RHEL:   sudo dnf install openblas-devel\n' +
      'then run `npm run build:native`.',
  );
}

function findNodeDir() {
  // The headers of the Node that runs this script: <prefix>/include/node/node_api.h
  const candidates = [process.env.npm_config_nodedir, resolve(dirname(process.execPath), '..')].filter(Boolean);
  const dir = candidates.find((d) => existsSync(join(d, 'include/node/node_api.h')));
  if (!dir)
    fail(
      `Node headers not found (looked for include/node/node_api.h under ${candidates.join(', ')}).\n` +
        '  Install the headers of this Node version (Debian: the nodejs package from NodeSource ships them;\n' +
        '  or set npm_config_nodedir to a Node source/headers directory) and run `npm run build:native`.',
    );
  return dir;
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
