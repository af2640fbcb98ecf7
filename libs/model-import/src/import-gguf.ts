// GGUF (llama.cpp) → Hugging Face directory: config.json, model.safetensors (float32),
// tokenizer.json, tokenizer_config.json, special_tokens_map.json, generation_config.json, and
// anvil-import.json (where it came from). Everything is checked before the first byte is
// written, and the directory lands atomically (atomic-dir.ts).
import { promises as fsp } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { hfConfigJson, modelShape, planTensors, unpermuteRows, type ModelShape } from './architecture';
import { checkTarget, writeDirAtomically } from './atomic-dir';
import { DEQUANTIZABLE, dequantize, UnsupportedTensorTypeError, unsupportedTypeMessage } from './dequantize';
import { GgufMetadata } from './gguf-metadata';
import { GgufError, GgufFile } from './gguf-reader';
import { SafetensorsStream } from './safetensors-writer';
import { sha256Of } from './sha256';
import { buildTokenizerFiles } from './tokenizer-files';

export interface ImportOptions {
  /** Replace a non-empty target directory (default: refuse). */
  overwrite?: boolean;
  /** Progress lines (one per phase, and every few tensors). */
  onProgress?: (line: string) => void;
  /** More fields for anvil-import.json (fetchModel records the model and wheel it came from). */
  record?: Record<string, unknown>;
}

export interface ImportResult {
  dir: string;
  shape: ModelShape;
  numParams: number;
  /** How many tensors of each ggml type the file held. */
  tensorTypes: Record<string, number>;
  /** sha256 of the GGUF file. */
  sha256: string;
  warnings: string[];
}

/** The file written beside the model saying where it came from. */
export const IMPORT_RECORD = 'anvil-import.json';

const json = (v: unknown) => JSON.stringify(v, null, 2) + '\n';

export async function importGguf(ggufPath: string, targetDir: string, opts: ImportOptions = {}): Promise<ImportResult> {
  const progress = opts.onProgress ?? (() => undefined);
  await checkTarget(resolve(targetDir), opts.overwrite ?? false); // before the work, not only after it
  const file = await GgufFile.open(ggufPath);
  try {
    const meta = new GgufMetadata(file.metadata, ggufPath);
    const shape = modelShape(meta, file.tensors, ggufPath);
    const plan = planTensors(shape, file.tensors, ggufPath);
    const unsupported = file.tensors.filter((t) => !DEQUANTIZABLE.has(t.type));
    if (unsupported.length)
      throw new UnsupportedTensorTypeError(
        `${ggufPath}: ${unsupportedTypeMessage(unsupported[0])}${unsupported.length > 1 ? ` (and ${unsupported.length - 1} more tensors)` : ''}`,
      );
    const tok = buildTokenizerFiles(meta, { vocabSize: shape.vocabSize, contextLength: shape.maxPositionEmbeddings, source: ggufPath });
    const tensorTypes: Record<string, number> = {};
    for (const t of file.tensors) tensorTypes[t.typeName] = (tensorTypes[t.typeName] ?? 0) + 1;
    const numParams = plan.reduce((a, p) => a + p.gguf.numel, 0);
    const sha256 = await sha256Of(ggufPath);
    progress(
      `${basename(ggufPath)}: ${shape.architecture}, ${shape.numLayers} layers, hidden ${shape.hiddenSize}, vocabulary ${shape.vocabSize}, ` +
        `${(numParams / 1e6).toFixed(1)}M parameters (${Object.entries(tensorTypes)
          .map(([k, n]) => `${n} ${k}`)
          .join(', ')})`,
    );

    const dir = await writeDirAtomically(targetDir, opts.overwrite ?? false, async (tmp) => {
      const write = (name: string, v: unknown) => fsp.writeFile(join(tmp, name), json(v));
      await write('config.json', hfConfigJson(shape, tok.ids));
      await write('generation_config.json', tok.generationConfig);
      await write('tokenizer.json', tok.tokenizerJson);
      await write('tokenizer_config.json', tok.tokenizerConfig);
      await write('special_tokens_map.json', tok.specialTokensMap);
      const out = await SafetensorsStream.create(
        join(tmp, 'model.safetensors'),
        plan.map((p) => ({ name: p.hfName, shape: p.shape })),
        { format: 'pt' },
      );
      try {
        for (const [i, p] of plan.entries()) {
          let data = dequantize(p.gguf, await file.tensorBytes(p.gguf));
          for (let j = 0; j < data.length; j++)
            if (!Number.isFinite(data[j]))
              throw new GgufError(`${ggufPath}: tensor ${p.gguf.name} holds a non-finite value at element ${j}`);
          if (p.unpermuteHeads !== undefined) data = unpermuteRows(data, p.unpermuteHeads, p.shape[1] ?? 1);
          await out.write(p.hfName, data);
          if ((i + 1) % 50 === 0 || i + 1 === plan.length) progress(`dequantized ${i + 1}/${plan.length} tensors`);
        }
        await out.close();
      } catch (e) {
        await out.abandon();
        throw e;
      }
      await write(IMPORT_RECORD, {
        format: 'gguf',
        source: basename(ggufPath),
        sha256,
        ggufVersion: file.version,
        name: meta.string('general.name', 'optional') ?? null,
        architecture: shape.architecture,
        tensorTypes,
        dtype: 'F32',
        preTokenizer: meta.string('tokenizer.ggml.pre', 'optional') ?? null,
        warnings: tok.warnings,
        ...opts.record,
      });
      return targetDir;
    });
    progress(`wrote ${dir}`);
    return { dir, shape, numParams, tensorTypes, sha256, warnings: tok.warnings };
  } finally {
    await file.close();
  }
}
