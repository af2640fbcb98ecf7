// Helpers shared by the CPU (native.mjs) and CUDA (native-cuda.mjs) engine builds: OpenBLAS
// discovery/installation and the Node headers of the running Node.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

export function makeLog(tag) {
  return {
    log: (msg) => console.log(`[${tag}] ${msg}`),
    fail: (msg) => {
      console.error(`\n[${tag}] FAILED: ${msg}\n`);
      process.exit(1);
    },
  };
}

const { log, fail } = makeLog('build:native');

export function multiarch() {
  const r = spawnSync('gcc', ['-print-multiarch'], { encoding: 'utf8' });
  return r.status === 0 && r.stdout.trim() ? r.stdout.trim() : `${process.arch === 'arm64' ? 'aarch64' : 'x86_64'}-linux-gnu`;
}

export function findOpenBlas() {
  const ma = multiarch();
  const headers = [
    `/usr/include/${ma}/openblas-pthread/cblas.h`,
    `/usr/include/${ma}/cblas.h`,
    '/usr/include/openblas/cblas.h',
    '/usr/include/cblas.h',
  ];
  // The header must be OpenBLAS's (it declares openblas_set_num_threads), not reference CBLAS.
  const header = headers.find((p) => existsSync(p) && readFileSync(p, 'utf8').includes('openblas_set_num_threads'));
  const libs = [`/usr/lib/${ma}/libopenblas.so`, '/usr/lib/libopenblas.so', '/usr/lib64/libopenblas.so', '/usr/local/lib/libopenblas.so'];
  const lib = libs.find((p) => existsSync(p));
  return header && lib ? { header, lib } : null;
}

export function ensureOpenBlas() {
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

export function findNodeDir() {
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
