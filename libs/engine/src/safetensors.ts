// Safetensors reading and writing, parsed in TypeScript with strict header validation
// (https://github.com/huggingface/safetensors: u64 little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}}, then the byte buffer; offsets are
// relative to the buffer and must tile it exactly, without gaps or overlaps).
import { promises as fsp } from 'node:fs';

export type Dtype =
  'F64' | 'F32' | 'F16' | 'BF16' | 'I64' | 'I32' | 'I16' | 'I8' | 'U8' | 'BOOL' | 'U16' | 'U32' | 'U64' | 'F8_E4M3' | 'F8_E5M2';

const DTYPE_SIZE: Record<Dtype, number> = {
  F64: 8,
  F32: 4,
  F16: 2,
  BF16: 2,
  I64: 8,
  I32: 4,
  I16: 2,
  I8: 1,
  U8: 1,
  BOOL: 1,
  U16: 2,
  U32: 4,
  U64: 8,
  F8_E4M3: 1,
  F8_E5M2: 1,
};

export class SafetensorsError extends Error {
  override name = 'SafetensorsError';
}

export interface SafetensorsTensor {
  dtype: Dtype;
  shape: number[];
  /** The tensor's raw bytes (a view into the file buffer). */
  bytes: Buffer;
}

export interface SafetensorsFile {
  tensors: Map<string, SafetensorsTensor>;
  metadata: Record<string, string>;
}

const MAX_HEADER = 100 * 1024 * 1024;

export function parseSafetensors(buf: Buffer, source = 'safetensors'): SafetensorsFile {
  const fail = (msg: string): never => {
    throw new SafetensorsError(`${source}: ${msg}`);
  };
  if (buf.length < 8) fail(`file too short (${buf.length} bytes) for a safetensors header`);
  const n = buf.readBigUInt64LE(0);
  if (n > BigInt(Math.min(MAX_HEADER, buf.length - 8)))
    fail(`header length ${n} exceeds the file (${buf.length} bytes) or the ${MAX_HEADER}-byte limit`);
  const headerLen = Number(n);
  let header: unknown;
  try {
    header = JSON.parse(buf.subarray(8, 8 + headerLen).toString('utf8'));
  } catch (e) {
    fail(`header is not valid JSON (${(e as Error).message})`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) fail('header must be a JSON object');
  const data = buf.subarray(8 + headerLen);
  const tensors = new Map<string, SafetensorsTensor>();
  let metadata: Record<string, string> = {};
  const spans: Array<[number, number, string]> = [];
  for (const [name, raw] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) fail('__metadata__ must be an object');
      for (const [k, v] of Object.entries(raw as Record<string, unknown>))
        if (typeof v !== 'string') fail(`__metadata__.${k} must be a string`);
      metadata = raw as Record<string, string>;
      continue;
    }
    if (typeof raw !== 'object' || raw === null) fail(`tensor ${name}: entry must be an object`);
    const e = raw as Record<string, unknown>;
    const dtype = e.dtype as Dtype;
    if (typeof dtype !== 'string' || !(dtype in DTYPE_SIZE)) fail(`tensor ${name}: unknown dtype ${JSON.stringify(e.dtype)}`);
    const shape = e.shape;
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0))
      fail(`tensor ${name}: shape must be an array of non-negative integers, got ${JSON.stringify(shape)}`);
    const offs = e.data_offsets;
    if (!Array.isArray(offs) || offs.length !== 2 || !offs.every((d) => Number.isSafeInteger(d) && d >= 0))
      fail(`tensor ${name}: data_offsets must be [begin, end] non-negative integers, got ${JSON.stringify(offs)}`);
    const [b, en] = offs as [number, number];
    if (b > en || en > data.length) fail(`tensor ${name}: data_offsets [${b}, ${en}] out of bounds (data section is ${data.length} bytes)`);
    const numel = (shape as number[]).reduce((a, d) => a * d, 1);
    if (en - b !== numel * DTYPE_SIZE[dtype])
      fail(
        `tensor ${name}: ${en - b} bytes for shape [${(shape as number[]).join(', ')}] of ${dtype} (expected ${numel * DTYPE_SIZE[dtype]})`,
      );
    spans.push([b, en, name]);
    tensors.set(name, { dtype, shape: shape as number[], bytes: data.subarray(b, en) });
  }
  // Offsets must tile the data section: sorted, starting at 0, no gap, no overlap, ending at its end.
  spans.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let pos = 0;
  for (const [b, en, name] of spans) {
    if (b !== pos) fail(`tensor ${name}: data_offsets begin at ${b} but the previous tensor ends at ${pos} (gap or overlap)`);
    pos = en;
  }
  if (pos !== data.length) fail(`tensors cover ${pos} bytes but the data section has ${data.length}`);
  return { tensors, metadata };
}

function halfToFloat(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** Converts an F32/F16/BF16 tensor into `out` (float32). Other dtypes are an error. */
export function toFloat32(t: SafetensorsTensor, out: Float32Array, name = 'tensor'): void {
  const n = t.bytes.length / DTYPE_SIZE[t.dtype];
  if (out.length !== n) throw new SafetensorsError(`${name}: ${n} elements in the file, ${out.length} expected`);
  const b = t.bytes;
  if (t.dtype === 'F32') {
    // copy bytes (the source may not be 4-byte aligned inside the file buffer)
    new Uint8Array(out.buffer, out.byteOffset, out.byteLength).set(b);
  } else if (t.dtype === 'BF16') {
    const u32 = new Uint32Array(out.buffer, out.byteOffset, n);
    for (let i = 0; i < n; i++) u32[i] = b.readUInt16LE(2 * i) << 16;
  } else if (t.dtype === 'F16') {
    for (let i = 0; i < n; i++) out[i] = halfToFloat(b.readUInt16LE(2 * i));
  } else {
    throw new SafetensorsError(`${name}: dtype ${t.dtype} is not supported for model weights (F32, F16, BF16 are)`);
  }
}

export interface TensorToWrite {
  name: string;
  shape: readonly number[];
  dtype: 'F32' | 'F16' | 'BF16';
  /** Raw little-endian bytes of the tensor, or a Float32Array for F32. */
  data: Float32Array | Uint8Array;
}

/** Writes a safetensors file; tensors are laid out in the given order, header padded to 8 bytes. */
export async function writeSafetensors(path: string, tensors: TensorToWrite[], metadata: Record<string, string> = {}): Promise<void> {
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length) header.__metadata__ = metadata;
  let off = 0;
  for (const t of tensors) {
    const len = t.data.byteLength;
    const numel = t.shape.reduce((a, d) => a * d, 1);
    if (len !== numel * DTYPE_SIZE[t.dtype]) throw new SafetensorsError(`${t.name}: data length does not match shape and dtype`);
    header[t.name] = { dtype: t.dtype, shape: [...t.shape], data_offsets: [off, off + len] };
    off += len;
  }
  let json = Buffer.from(JSON.stringify(header), 'utf8');
  const pad = (8 - (json.length % 8)) % 8;
  if (pad) json = Buffer.concat([json, Buffer.alloc(pad, 0x20)]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  const fh = await fsp.open(path, 'w');
  try {
    const writeAll = async (u: Uint8Array) => {
      for (let done = 0; done < u.length;) {
        const { bytesWritten } = await fh.write(u, done, Math.min(u.length - done, 1 << 30));
        done += bytesWritten;
      }
    };
    await writeAll(len);
    await writeAll(json);
    for (const t of tensors) await writeAll(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength));
  } finally {
    await fh.close();
  }
}
