#!/usr/bin/env node
// Builds the CUDA engine binary libs/engine/build-cuda/anvil_engine_cuda.node when nvcc is
// present, and skips cleanly (exit 0, says why) when it is not. Run by `npm install` after the CPU
// build and by `npm run build:cuda` (--force).
//
// The CUDA binary is the whole engine: every CPU source (the reference, also used by the kernel
// checks) compiled with -DANVIL_WITH_CUDA, plus native/cuda/*.cu (nvcc, sm_90 SASS + compute_90
// PTX) and native/cuda/*.cc. The CUDA runtime is linked statically and cuBLASLt is opened with
// dlopen at first use, so the binary loads on any machine with a driver and reports a missing
// library or device as an error the loader turns into a CPU fallback.
//
// nvcc is looked up in ANVIL_NVCC, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin and the toolkit that
// `--fetch-toolkit` unpacks from PyPI's nvidia-* wheels into .cache/cuda-toolkit (CUDA 13.0, for
// machines without a toolkit: CI uses it to prove the CUDA sources compile).
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findNodeDir, findOpenBlas, makeLog } from './native-common.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const engineDir = join(root, 'libs/engine');
const nativeDir = join(engineDir, 'native');
const cudaDir = join(nativeDir, 'cuda');
const outDir = join(engineDir, 'build-cuda');
const objDir = join(outDir, 'obj');
const binary = join(outDir, 'anvil_engine_cuda.node');
const stampFile = join(outDir, '.anvil-build-stamp');
const toolkitDir = join(root, '.cache/cuda-toolkit');
const force = process.argv.includes('--force');
const fetchToolkit = process.argv.includes('--fetch-toolkit');
const require = createRequire(import.meta.url);
const { log, fail } = makeLog('build:cuda');

// CUDA 13.0 matches the 580 drivers of our GPU machines; the wheels hold a complete nvcc.
const TOOLKIT_WHEELS = [
  'nvidia-cuda-nvcc==13.0.88',
  'nvidia-nvvm==13.0.88',
  'nvidia-cuda-crt==13.0.88',
  'nvidia-cuda-runtime==13.0.96',
  'nvidia-cuda-cccl==13.0.85',
  'nvidia-cublas==13.0.2.14', // cublasLt.h only (the library itself is opened at run time)
];

function run(cmd, args, opts = {}) {
  return spawnSync(cmd, args, { encoding: 'utf8', ...opts });
}

function fetchToolkitWheels() {
  const nvcc = join(toolkitDir, 'nvidia/cu13/bin/nvcc');
  if (existsSync(nvcc)) return;
  const wheels = join(toolkitDir, 'wheels');
  mkdirSync(wheels, { recursive: true });
  log(`fetching the CUDA 13.0 toolkit wheels from PyPI into ${toolkitDir} ...`);
  const pip = run(
    'python3',
    [
      '-m',
      'pip',
      'download',
      '--no-deps',
      '--only-binary=:all:',
      '--platform',
      'manylinux_2_27_x86_64',
      '--platform',
      'manylinux2014_x86_64',
      '--platform',
      'manylinux_2_17_x86_64',
      '--platform',
      'manylinux_2_12_x86_64',
      '--python-version',
      '3.11',
      '-q',
      '-d',
      wheels,
      ...TOOLKIT_WHEELS,
    ],
    { stdio: 'inherit' },
  );
  if (pip.status !== 0) fail('pip download of the CUDA toolkit wheels failed (see above)');
  for (const w of readdirSync(wheels).filter((f) => f.endsWith('.whl'))) {
    // cublas: its headers only (the .so files are 700 MB and opened from the machine's CUDA at run time)
    const only = w.startsWith('nvidia_cublas') ? ['nvidia/cu13/include/*'] : [];
    const r = run('python3', ['-c', UNZIP_PY, join(wheels, w), toolkitDir, ...only], { stdio: 'inherit' });
    if (r.status !== 0) fail(`unpacking ${w} failed`);
  }
  rmSync(wheels, { recursive: true, force: true });
  if (!existsSync(nvcc)) fail(`the toolkit wheels did not provide ${nvcc}`);
}

// Unzips a wheel (argv[1]) into argv[2], optionally only the members matching the globs argv[3:],
// keeping the executable bits of bin/ files (zipfile drops them).
const UNZIP_PY = `
import sys, zipfile, os, fnmatch
z = zipfile.ZipFile(sys.argv[1]); dest = sys.argv[2]; pats = sys.argv[3:]
for i in z.infolist():
    if pats and not any(fnmatch.fnmatch(i.filename, p) for p in pats): continue
    p = z.extract(i, dest)
    mode = (i.external_attr >> 16) & 0o777
    if mode: os.chmod(p, mode)
    elif '/bin/' in i.filename: os.chmod(p, 0o755)
`;

function findNvcc() {
  const candidates = [
    process.env.ANVIL_NVCC,
    ...(process.env.PATH ?? '')
      .split(':')
      .filter(Boolean)
      .map((d) => join(d, 'nvcc')),
    process.env.CUDA_HOME && join(process.env.CUDA_HOME, 'bin/nvcc'),
    '/usr/local/cuda/bin/nvcc',
    join(toolkitDir, 'nvidia/cu13/bin/nvcc'),
  ].filter(Boolean);
  return candidates.find((p) => existsSync(p)) ?? null;
}

function cudaPaths(nvcc) {
  const home = resolve(dirname(nvcc), '..');
  const include = join(home, 'include');
  const libDir = ['lib64', 'lib', 'targets/x86_64-linux/lib']
    .map((d) => join(home, d))
    .find((d) => existsSync(join(d, 'libcudart_static.a')));
  if (!existsSync(join(include, 'cuda_runtime.h'))) fail(`${include}/cuda_runtime.h not found next to ${nvcc}`);
  if (!existsSync(join(include, 'cublasLt.h'))) fail(`${include}/cublasLt.h not found (install cuBLAS development headers)`);
  if (!libDir) fail(`libcudart_static.a not found under ${home}`);
  return { home, include, libDir };
}

function sources() {
  const cc = readdirSync(nativeDir)
    .filter((f) => f.endsWith('.cc'))
    .map((f) => join(nativeDir, f));
  const cudaCc = readdirSync(cudaDir)
    .filter((f) => f.endsWith('.cc'))
    .map((f) => join(cudaDir, f));
  const cu = readdirSync(cudaDir)
    .filter((f) => f.endsWith('.cu'))
    .map((f) => join(cudaDir, f));
  return { cc: [...cc, ...cudaCc], cu };
}

function sourceHash(nvccVersion) {
  const h = createHash('sha256');
  for (const dir of [nativeDir, cudaDir])
    for (const f of readdirSync(dir).sort()) {
      if (!/\.(cc|cu|cuh|h)$/.test(f)) continue;
      h.update(f);
      h.update(readFileSync(join(dir, f)));
    }
  h.update(readFileSync(fileURLToPath(import.meta.url)));
  h.update(`${process.version} ${process.arch} ${nvccVersion}`);
  return h.digest('hex');
}

// Runs compile jobs with bounded parallelism; resolves with the failures.
async function runJobs(jobs, parallel) {
  const failures = [];
  let next = 0;
  async function worker() {
    while (next < jobs.length) {
      const job = jobs[next++];
      const out = await new Promise((res) => {
        const p = spawn(job.cmd, job.args, { stdio: ['ignore', 'pipe', 'pipe'] });
        let text = '';
        p.stdout.on('data', (d) => (text += d));
        p.stderr.on('data', (d) => (text += d));
        p.on('close', (code) => res({ code, text }));
      });
      if (out.text.trim()) process.stdout.write(out.text);
      if (out.code !== 0) failures.push(job.name);
      else log(`compiled ${job.name}`);
    }
  }
  await Promise.all(Array.from({ length: parallel }, worker));
  return failures;
}

async function main() {
  if (process.env.ANVIL_SKIP_NATIVE === '1' || process.env.ANVIL_SKIP_CUDA === '1') {
    log('ANVIL_SKIP_NATIVE/ANVIL_SKIP_CUDA set: skipping the CUDA build');
    return;
  }
  if (fetchToolkit && !findNvcc()) fetchToolkitWheels();
  const nvcc = findNvcc();
  if (!nvcc) {
    log(
      'skipped: nvcc not found (ANVIL_NVCC, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin); the CPU engine is the backend. ' +
        '`npm run build:cuda -- --fetch-toolkit` fetches CUDA 13.0 from PyPI to compile anyway.',
    );
    return;
  }
  const version = run(nvcc, ['--version']).stdout?.trim().split('\n').pop() ?? 'unknown';
  const hash = sourceHash(version);
  if (!force && existsSync(binary) && existsSync(stampFile) && readFileSync(stampFile, 'utf8').trim() === hash) {
    log(`up to date: ${binary}`);
    return;
  }
  const blas = findOpenBlas();
  if (!blas) fail('OpenBLAS not found: run the CPU build first (`npm run build:native`), which installs it');
  const cuda = cudaPaths(nvcc);
  const nodedir = findNodeDir();
  const addonApi = require('node-addon-api').include_dir;
  log(`nvcc ${nvcc} (${version}); CUDA ${cuda.home}`);
  mkdirSync(objDir, { recursive: true });

  const defines = ['-DANVIL_WITH_CUDA', '-DNAPI_VERSION=8', '-DNODE_ADDON_API_CPP_EXCEPTIONS', '-DNODE_ADDON_API_CPP_EXCEPTIONS_ALL'];
  const includes = [
    `-I${join(nodedir, 'include/node')}`,
    `-I${addonApi}`,
    `-I${dirname(blas.header)}`,
    `-I${cuda.include}`,
    `-I${nativeDir}`,
  ];
  const cxxFlags = [
    '-std=c++17',
    '-O3',
    '-fPIC',
    '-fexceptions',
    '-fno-math-errno',
    '-fopenmp',
    '-Wall',
    '-Wno-unused-function',
    ...(process.arch === 'x64' ? ['-march=x86-64-v3'] : []),
  ];
  const arch = process.env.ANVIL_CUDA_ARCH ?? '90';
  const nvccFlags = [
    '-std=c++17',
    '-O3',
    '--expt-relaxed-constexpr',
    '-Xcompiler',
    '-fPIC,-fopenmp',
    `-gencode=arch=compute_${arch},code=sm_${arch}`,
    `-gencode=arch=compute_${arch},code=compute_${arch}`,
  ];
  const { cc, cu } = sources();
  const objName = (f) => join(objDir, f.slice(nativeDir.length + 1).replace(/[/]/g, '_') + '.o');
  const jobs = [
    // nvcc first: the slowest compiles
    ...cu.map((f) => ({
      name: f.slice(engineDir.length + 1),
      cmd: nvcc,
      args: [...nvccFlags, ...defines, ...includes, '-c', f, '-o', objName(f)],
    })),
    ...cc.map((f) => ({
      name: f.slice(engineDir.length + 1),
      cmd: 'g++',
      args: [...cxxFlags, ...defines, ...includes, '-c', f, '-o', objName(f)],
    })),
  ];
  const t0 = Date.now();
  const failures = await runJobs(jobs, Math.max(1, cpus().length));
  if (failures.length) fail(`compilation failed: ${failures.join(', ')}`);
  const link = run(
    'g++',
    [
      '-shared',
      '-o',
      binary,
      ...[...cu, ...cc].map(objName),
      `-L${cuda.libDir}`,
      '-l:libcudart_static.a',
      '-lopenblas',
      '-fopenmp',
      '-ldl',
      '-lrt',
      '-lpthread',
    ],
    {
      stdio: 'inherit',
    },
  );
  if (link.status !== 0) fail('linking anvil_engine_cuda.node failed');
  // Loading it here with RTLD_NOW proves every symbol resolves (a kernel missing from the link
  // fails now, not at its first call; N-API symbols come from node itself); the device is checked
  // at run time.
  const load =
    `const m = { exports: {} }; process.dlopen(m, ${JSON.stringify(binary)}, require('os').constants.dlopen.RTLD_NOW);` +
    ` const i = m.exports.info(); console.log(JSON.stringify({ backend: i.backend, device: i.device }))`;
  const check = run(process.execPath, ['-e', load]);
  if (check.status !== 0) fail(`the built CUDA addon does not load:\n${check.stderr}`);
  writeFileSync(stampFile, hash + '\n');
  log(`built ${binary} in ${((Date.now() - t0) / 1000).toFixed(1)} s: ${check.stdout.trim()}`);
}

main().catch((e) => fail(e.stack ?? String(e)));
