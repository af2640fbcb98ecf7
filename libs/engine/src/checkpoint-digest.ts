// The checksum a published checkpoint travels with (weights.published.sha256): SHA-256 over the
// files that define the weights — config.json and every safetensors weight file the loader reads
// (model.safetensors, or the index and its shards; for a LoRA adapter directory, which has no
// config.json, adapter_config.json and adapter_model.safetensors) — each as
// "<name>\0<sha256 of its bytes>\n", in name order. The trainer computes it after writing; the inference-proxy recomputes it before a
// swap and refuses a checkpoint whose bytes differ (truncated copy, concurrent overwrite, bit rot).
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, promises as fsp } from 'node:fs';
import { basename, join } from 'node:path';

export class CheckpointDigestError extends Error {
  override name = 'CheckpointDigestError';
}

async function fileSha256(path: string): Promise<string> {
  const h = createHash('sha256');
  await new Promise<void>((resolve, reject) => {
    createReadStream(path)
      .on('data', (chunk) => h.update(chunk))
      .on('error', reject)
      .on('end', () => resolve());
  });
  return h.digest('hex');
}

/** The weight-defining files of a Hugging Face checkpoint directory (or a PEFT LoRA adapter directory), by name. */
export async function checkpointWeightFiles(dir: string): Promise<string[]> {
  if (!existsSync(join(dir, 'config.json')) && existsSync(join(dir, 'adapter_config.json'))) {
    if (!existsSync(join(dir, 'adapter_model.safetensors'))) throw new CheckpointDigestError(`${dir}: no adapter_model.safetensors`);
    return ['adapter_config.json', 'adapter_model.safetensors'];
  }
  if (!existsSync(join(dir, 'config.json'))) throw new CheckpointDigestError(`${dir}: no config.json`);
  const index = join(dir, 'model.safetensors.index.json');
  if (existsSync(index)) {
    let map: unknown;
    try {
      map = (JSON.parse(await fsp.readFile(index, 'utf8')) as { weight_map?: unknown }).weight_map;
    } catch (e) {
      throw new CheckpointDigestError(`${index}: not valid JSON (${(e as Error).message})`);
    }
    if (typeof map !== 'object' || map === null) throw new CheckpointDigestError(`${index}: weight_map missing`);
    const shards = [...new Set(Object.values(map as Record<string, string>))];
    for (const f of shards)
      if (typeof f !== 'string' || basename(f) !== f) throw new CheckpointDigestError(`${index}: bad shard name ${JSON.stringify(f)}`);
    return ['config.json', 'model.safetensors.index.json', ...shards].sort();
  }
  if (!existsSync(join(dir, 'model.safetensors')))
    throw new CheckpointDigestError(`${dir}: neither model.safetensors nor model.safetensors.index.json`);
  return ['config.json', 'model.safetensors'];
}

/** Hex SHA-256 of a checkpoint directory's weights (see the file comment for the exact rule). */
export async function checkpointDigest(dir: string): Promise<string> {
  const files = await checkpointWeightFiles(dir);
  const h = createHash('sha256');
  for (const f of files) {
    const path = join(dir, f);
    if (!existsSync(path)) throw new CheckpointDigestError(`${dir}: ${f} is missing`);
    h.update(`${f}\0${await fileSha256(path)}\n`);
  }
  return h.digest('hex');
}

/** Throws CheckpointDigestError unless the directory's digest equals `expected`. */
export async function verifyCheckpointDigest(dir: string, expected: string): Promise<void> {
  const actual = await checkpointDigest(dir);
  if (actual !== expected)
    throw new CheckpointDigestError(`${dir}: checksum mismatch (expected sha256 ${expected}, the files give ${actual})`);
}
