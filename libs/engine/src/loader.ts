// Finds, selects and loads the native engine binary.
//
// Backends: 'cpu' is always built (the reference); 'cuda' (build-cuda/anvil_engine_cuda.node, built
// when nvcc is present) is taken when its binary loads and reports a usable device, else the CPU
// build with the reason. ANVIL_ENGINE_BACKEND=cpu|cuda forces one (forcing cuda without a device
// is an error); ANVIL_ENGINE_BINARY=/path/to/x.node overrides the file. The selection, and why it
// was made, is reported by engineInfo(); loadBackend() gives either one explicitly (the CUDA
// checks run both in one process).
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import type { NativeAddon, NativeInfo } from './native';

export type Backend = 'cpu' | 'cuda';

export interface EngineSelection {
  backend: Backend;
  /** Why this backend was taken (forced by env, only one built, no device, ...). */
  reason: string;
  binaryPath: string;
  info: NativeInfo;
  addon: NativeAddon;
}

export class EngineLoadError extends Error {
  override name = 'EngineLoadError';
}

const BINARIES: Record<Backend, string> = {
  cpu: 'libs/engine/build/Release/anvil_engine.node',
  cuda: 'libs/engine/build-cuda/anvil_engine_cuda.node',
};

/** The repository root: the nearest directory upwards whose package.json is named "anvil". */
export function findRepoRoot(start?: string): string {
  const starts = [start, typeof __dirname !== 'undefined' ? __dirname : undefined, process.cwd()].filter(
    (s): s is string => typeof s === 'string',
  );
  for (const s of starts) {
    let dir = resolve(s);
    for (;;) {
      const pj = join(dir, 'package.json');
      if (existsSync(pj)) {
        try {
          if ((JSON.parse(readFileSync(pj, 'utf8')) as { name?: string }).name === 'anvil') return dir;
        } catch {
          /* not ours; keep walking */
        }
      }
      const up = dirname(dir);
      if (up === dir) break;
      dir = up;
    }
  }
  throw new EngineLoadError(
    `cannot find the Anvil repository root (a package.json named "anvil") above ${starts.join(' or ')}; ` +
      'set ANVIL_ENGINE_BINARY to the path of anvil_engine.node',
  );
}

function fixes(path: string, detail: string): string {
  return [
    `Anvil native engine not available: ${detail}`,
    `  binary: ${path}`,
    '  fixes:',
    '    1. build it: `npm run build:native` (npm install does this via postinstall)',
    '    2. install OpenBLAS: `apt-get install -y libopenblas-dev` (Debian/Ubuntu), then step 1',
    '    3. make sure a C++17 compiler, make and python3 are installed (node-gyp needs them), then step 1',
    '    4. or point ANVIL_ENGINE_BINARY at a built anvil_engine.node',
  ].join('\n');
}

/**
 * OpenBLAS picks its GEMM kernels (and their blocking) per CPU at load time, and each choice sums in
 * its own order: the same training run then gives other weights on an AVX-512 Intel machine than on
 * an AMD Zen one, and the tiny model's warm start is chaotic enough that this changed where it
 * stopped (530 SFT steps on one machine, 565 on another) and what RL made of it. The addon is built
 * for x86-64-v3 (AVX2 + FMA) anyway, so on x64 every machine is given the Haswell kernels unless the
 * user chose a core type: Zen's are the same kernels, bit for bit (checked with cblas_sgemm on five
 * shapes), so AMD machines lose nothing and AVX-512 machines give up a little GEMM speed for runs
 * that reproduce across machines. Set OPENBLAS_CORETYPE yourself to choose otherwise.
 */
export function pinBlasKernels(env: Record<string, string | undefined>, arch: string): void {
  if (arch === 'x64' && (env.OPENBLAS_CORETYPE === undefined || env.OPENBLAS_CORETYPE === '')) env.OPENBLAS_CORETYPE = 'Haswell';
}

/**
 * OpenBLAS's idle threads spin on sched_yield for 2^OPENBLAS_THREAD_TIMEOUT cycles (default 2^28,
 * about 0.1 s) before they sleep. The engine calls a GEMM every few hundred microseconds with its own
 * OpenMP loops (attention, SwiGLU, norms) in between, so they never slept: on two cores they took a
 * quarter of the CPU from those loops, as system time (the warm start: 74 s of it, 141 s wall). With
 * 2^4 they sleep almost at once: 13 s of system time, 122 s wall, and the same weights bit for bit
 * (the timeout changes how idle threads wait, not how a GEMM is split). Set it yourself to choose
 * otherwise.
 */
export function quietBlasThreads(env: Record<string, string | undefined>): void {
  if (env.OPENBLAS_THREAD_TIMEOUT === undefined || env.OPENBLAS_THREAD_TIMEOUT === '') env.OPENBLAS_THREAD_TIMEOUT = '4';
}

function loadBinary(path: string): NativeAddon {
  if (!existsSync(path)) throw new EngineLoadError(fixes(path, 'the binary does not exist'));
  // libgomp reads its settings when the addon is loaded. Idle OpenMP workers that spin would steal
  // the cores OpenBLAS's own threads need right after each of our parallel regions, so let them
  // sleep unless the user chose otherwise.
  if (process.env.OMP_WAIT_POLICY === undefined) process.env.OMP_WAIT_POLICY = 'PASSIVE';
  pinBlasKernels(process.env, process.arch);
  quietBlasThreads(process.env);
  try {
    const req = createRequire(path);
    return req(path) as NativeAddon;
  } catch (e) {
    throw new EngineLoadError(fixes(path, `loading failed: ${(e as Error).message}`));
  }
}

let selected: EngineSelection | undefined;

/** Loads (once) and returns the selected backend. Throws one EngineLoadError listing fixes. */
export function loadEngine(): EngineSelection {
  if (!selected) selected = selectEngine(process.env);
  return selected;
}

/** Selects and loads a backend from the given environment (uncached; loadEngine() caches). */
export function selectEngine(env: Record<string, string | undefined>): EngineSelection {
  const forced = env.ANVIL_ENGINE_BACKEND;
  if (forced !== undefined && forced !== '' && forced !== 'cpu' && forced !== 'cuda')
    throw new EngineLoadError(`ANVIL_ENGINE_BACKEND must be "cpu" or "cuda", got "${forced}"`);
  const override = env.ANVIL_ENGINE_BINARY;
  const root = override ? '' : findRepoRoot();
  const pathOf = (b: Backend) => (override ? resolve(override) : join(root, BINARIES[b]));

  const take = (backend: Backend, reason: string): EngineSelection => {
    const binaryPath = pathOf(backend);
    const addon = loadBinary(binaryPath);
    const info = addon.info();
    if (info.backend !== backend)
      throw new EngineLoadError(fixes(binaryPath, `expected a ${backend} build but the binary is a ${info.backend} build`));
    if (backend === 'cuda' && !info.device?.ok)
      throw new EngineLoadError(`the CUDA build loads but has no usable device: ${info.device?.why ?? 'unknown reason'}`);
    return { backend, reason, binaryPath, info, addon };
  };

  if (forced === 'cpu') return take('cpu', 'ANVIL_ENGINE_BACKEND=cpu');
  if (forced === 'cuda') {
    if (!override && !existsSync(pathOf('cuda')))
      throw new EngineLoadError(
        fixes(
          pathOf('cuda'),
          'ANVIL_ENGINE_BACKEND=cuda but no CUDA build exists (`npm run build:cuda` builds it where nvcc is installed)',
        ),
      );
    return take('cuda', 'ANVIL_ENGINE_BACKEND=cuda');
  }
  if (!override && existsSync(pathOf('cuda'))) {
    try {
      return take('cuda', 'CUDA build present, loads and has a device');
    } catch (e) {
      return take('cpu', `CUDA build present but unusable (${(e as Error).message.split('\n')[0]}); using CPU`);
    }
  }
  return take('cpu', override ? `ANVIL_ENGINE_BINARY=${override}` : 'no CUDA build found; CPU is the reference backend');
}

const byBackend = new Map<Backend, EngineSelection>();

/**
 * One backend explicitly, whatever the default selection is (cached). Used to run the CPU
 * reference next to the CUDA engine in one process, e.g. `Model.create(cfg, { backend: 'cpu' })`.
 */
export function loadBackend(backend: Backend): EngineSelection {
  const def = loadEngine();
  if (def.backend === backend) return def;
  let sel = byBackend.get(backend);
  if (!sel) {
    sel = selectEngine({ ...process.env, ANVIL_ENGINE_BACKEND: backend, ANVIL_ENGINE_BINARY: undefined });
    byBackend.set(backend, sel);
  }
  return sel;
}

/** Which backend was taken and why (loads the engine if needed). */
export function engineInfo(): Omit<EngineSelection, 'addon'> {
  const { addon: _addon, ...rest } = loadEngine();
  return rest;
}

/** Sets the thread count of the engine's OpenMP kernels and of OpenBLAS (default 2 or ANVIL_ENGINE_THREADS). */
export function setThreads(n: number): void {
  loadEngine().addon.setThreads(n);
}

export function getThreads(): number {
  return loadEngine().addon.getThreads();
}
