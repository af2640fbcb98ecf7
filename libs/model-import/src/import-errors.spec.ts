import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { UnsupportedModelError } from './architecture';
import { TargetExistsError } from './atomic-dir';
import { UnsupportedTensorTypeError } from './dequantize';
import { GgufError } from './gguf-reader';
import { importGguf } from './import-gguf';
import {
  ggufName,
  hfToGguf,
  kv,
  randomCheckpoint,
  tinyVocab,
  TINY_LLAMA,
  tokenizerMetadata,
  writeGguf,
  type HfModelConfig,
  type HfTensor,
  type Kv,
  type TensorToWrite,
} from './testing';

const root = mkdtempSync(join(tmpdir(), 'gguf-errors-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const vocab = tinyVocab(40);
const V = vocab.tokens.length;
let n = 0;

function file(buf: Buffer): string {
  const p = join(root, `f${++n}.gguf`);
  writeFileSync(p, buf);
  return p;
}

const good = (over: { tensors?: HfTensor[]; metadata?: Kv[]; config?: HfModelConfig } = {}) =>
  hfToGguf({
    config: over.config ?? TINY_LLAMA,
    tensors: over.tensors ?? randomCheckpoint(over.config ?? TINY_LLAMA, V, { tie: true }),
    vocab,
    metadata: over.metadata,
  });

/** A GGUF whose tensors are given raw (llama.cpp names, ne[], types), with a valid llama header and tokenizer. */
function raw(tensors: TensorToWrite[], metadata: Kv[] = []): Buffer {
  const c = TINY_LLAMA;
  const base = [
    kv.str('general.architecture', 'llama'),
    kv.u32('llama.block_count', c.numLayers),
    kv.u32('llama.context_length', c.contextLength),
    kv.u32('llama.embedding_length', c.hiddenSize),
    kv.u32('llama.feed_forward_length', c.intermediateSize),
    kv.u32('llama.attention.head_count', c.numHeads),
    kv.u32('llama.attention.head_count_kv', c.numKvHeads),
    kv.f32('llama.attention.layer_norm_rms_epsilon', c.rmsNormEps),
    ...tokenizerMetadata(vocab),
  ];
  const replaced = new Set(metadata.map((m) => m.key));
  return writeGguf({ metadata: [...base.filter((m) => !replaced.has(m.key)), ...metadata], tensors });
}

const f32Tensors = (tensors: HfTensor[]): TensorToWrite[] =>
  tensors.map((t) => ({ name: ggufName(t.name), dims: [...t.shape].reverse(), type: 0, data: new Uint8Array(t.data.buffer.slice(0)) }));

/** Imports and expects a failure of this kind and message, with nothing left behind. */
async function expectRefused(gguf: string, kind: new (...a: never[]) => Error, message: RegExp) {
  const parent = mkdtempSync(join(root, 'target-'));
  const target = join(parent, 'model');
  const err = await importGguf(gguf, target).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(kind);
  expect((err as Error).message).toMatch(message);
  expect(readdirSync(parent)).toEqual([]); // no target, no partial directory
}

describe('importGguf: every bad input is a clear error and writes nothing', () => {
  it('a truncated or corrupt file', async () => {
    const buf = good();
    await expectRefused(file(buf.subarray(0, buf.length - 100)), GgufError, /truncated: tensor .* past the end of the file/);
    await expectRefused(file(buf.subarray(0, 1000)), GgufError, /truncated/);
    await expectRefused(file(Buffer.concat([Buffer.from('GGJT'), buf.subarray(4)])), GgufError, /not a GGUF file/);
    await expectRefused(file(Buffer.alloc(0)), GgufError, /truncated: magic needs 4 bytes, 0 left/);
  });

  it('an architecture other than llama and qwen2', async () => {
    await expectRefused(
      file(good({ metadata: [kv.str('general.architecture', 'gemma2')] })),
      UnsupportedModelError,
      /architecture "gemma2" is not supported \(supported: llama, qwen2\)/,
    );
    await expectRefused(file(good({ metadata: [kv.u32('llama.expert_count', 8)] })), UnsupportedModelError, /mixture-of-experts model/);
  });

  it('a quantization it cannot dequantize, named with its tensor, before anything is written', async () => {
    const config = { ...TINY_LLAMA, intermediateSize: 256 };
    const tensors = f32Tensors(randomCheckpoint(config, V, { tie: true }));
    const down = tensors.find((t) => t.name === 'blk.0.ffn_down.weight')!;
    down.type = 14; // Q6_K: 256 elements per 210-byte block
    down.data = new Uint8Array((down.dims[0] * down.dims[1] * 210) / 256);
    const buf = raw(tensors, [kv.u32('llama.feed_forward_length', 256)]);
    await expectRefused(
      file(buf),
      UnsupportedTensorTypeError,
      /tensor blk\.0\.ffn_down\.weight has type Q6_K, which cannot be imported \(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1\)/,
    );
  });

  it('missing, unexpected or misshapen tensors, and metadata that contradicts them', async () => {
    const all = f32Tensors(randomCheckpoint(TINY_LLAMA, V, { tie: true }));
    await expectRefused(
      file(raw(all.filter((t) => t.name !== 'blk.0.ffn_up.weight'))),
      UnsupportedModelError,
      /missing tensors: blk\.0\.ffn_up\.weight/,
    );
    const extra = { name: 'blk.0.attn_rot_embd', dims: [4], type: 0, data: new Uint8Array(16) };
    await expectRefused(
      file(raw([...all, extra])),
      UnsupportedModelError,
      /unexpected tensor blk\.0\.attn_rot_embd \(not part of a llama model with 1 layers\)/,
    );
    const freqs = { name: 'rope_freqs.weight', dims: [8], type: 0, data: new Uint8Array(32) };
    await expectRefused(file(raw([...all, freqs])), UnsupportedModelError, /rope_freqs\.weight holds per-dimension RoPE frequency factors/);
    await expectRefused(
      file(raw(all, [kv.u32('llama.attention.head_count_kv', 2)])),
      UnsupportedModelError,
      /tensor blk\.0\.attn_k\.weight has shape \[16, 32\] \(PyTorch order\), expected \[32, 32\]/,
    );
    await expectRefused(
      file(raw(all, [kv.u32('llama.vocab_size', V + 1)])),
      UnsupportedModelError,
      /llama\.vocab_size is \d+ but token_embd\.weight has \d+ rows/,
    );
    await expectRefused(
      file(raw(all, [kv.str('llama.rope.scaling.type', 'yarn')])),
      UnsupportedModelError,
      /RoPE scaling "yarn" is not supported/,
    );
    await expectRefused(
      file(raw(all, [kv.str('llama.block_count', 'one')])),
      GgufError,
      /metadata llama\.block_count must be an integer, got STRING "one"/,
    );
    await expectRefused(
      file(raw(all.filter((t) => t.name !== 'token_embd.weight'))),
      UnsupportedModelError,
      /no token_embd\.weight tensor/,
    );
  });

  it('a tensor holding NaN, found half-way through writing: the half-written directory is removed', async () => {
    const tensors = randomCheckpoint(TINY_LLAMA, V, { tie: true });
    tensors.find((t) => t.name === 'model.norm.weight')!.data[3] = NaN; // the last tensor written
    await expectRefused(file(good({ tensors })), GgufError, /tensor output_norm\.weight holds a non-finite value at element 3/);
  });
});

describe('importGguf: the target directory', () => {
  const gguf = file(good());

  it('refuses a non-empty directory unless told to overwrite, and leaves it as it was', async () => {
    const target = join(root, 'full');
    mkdirSync(target);
    writeFileSync(join(target, 'mine.txt'), 'keep me');
    await expect(importGguf(gguf, target)).rejects.toThrow(TargetExistsError);
    await expect(importGguf(gguf, target)).rejects.toThrow(/full is not empty \(pass overwrite \/ --force to replace it\)/);
    expect(readdirSync(target)).toEqual(['mine.txt']);
    await importGguf(gguf, target, { overwrite: true });
    expect(readdirSync(target).sort()).toEqual(
      [
        'anvil-import.json',
        'config.json',
        'generation_config.json',
        'model.safetensors',
        'special_tokens_map.json',
        'tokenizer.json',
        'tokenizer_config.json',
      ].sort(),
    );
    expect(readdirSync(root).filter((f) => f.includes('partial'))).toEqual([]);
  });

  it('imports into an empty directory, or creates it and its parents', async () => {
    const empty = join(root, 'empty');
    mkdirSync(empty);
    await importGguf(gguf, empty);
    expect(existsSync(join(empty, 'config.json'))).toBe(true);
    const deep = join(root, 'a', 'b', 'c');
    await importGguf(gguf, deep);
    expect(existsSync(join(deep, 'model.safetensors'))).toBe(true);
  });

  it('refuses a target that is a file', async () => {
    const target = join(root, 'a-file');
    writeFileSync(target, 'x');
    await expect(importGguf(gguf, target, { overwrite: true })).rejects.toThrow(/a-file exists and is not a directory/);
    expect(readFileSync(target, 'utf8')).toBe('x');
  });

  it('a failed overwrite keeps the old directory', async () => {
    const target = join(root, 'keep');
    mkdirSync(target);
    writeFileSync(join(target, 'old.txt'), 'old');
    const tensors = randomCheckpoint(TINY_LLAMA, V, { tie: true });
    tensors.at(-1)!.data[0] = Infinity;
    await expect(importGguf(file(good({ tensors })), target, { overwrite: true })).rejects.toThrow(/non-finite/);
    expect(readdirSync(target)).toEqual(['old.txt']);
  });
});
