// A small GGUF writer for tests (ggml/docs/gguf.md), written from the format description and not
// from the reader, so that the reader is checked against an independent encoding.
import { GgufValueType } from '../gguf-format';

export interface Kv {
  key: string;
  type: GgufValueType;
  value: unknown;
  /** For arrays. */
  elementType?: GgufValueType;
}

export interface TensorToWrite {
  name: string;
  /** ggml ne[] (innermost first). */
  dims: number[];
  /** ggml type id. */
  type: number;
  data: Uint8Array;
}

export interface GgufSpec {
  version?: number;
  alignment?: number;
  metadata: Kv[];
  tensors: TensorToWrite[];
}

/** Shorthands for metadata entries. */
export const kv = {
  u32: (key: string, value: number): Kv => ({ key, type: GgufValueType.UINT32, value }),
  i32: (key: string, value: number): Kv => ({ key, type: GgufValueType.INT32, value }),
  u64: (key: string, value: bigint): Kv => ({ key, type: GgufValueType.UINT64, value }),
  f32: (key: string, value: number): Kv => ({ key, type: GgufValueType.FLOAT32, value }),
  bool: (key: string, value: boolean): Kv => ({ key, type: GgufValueType.BOOL, value }),
  str: (key: string, value: string): Kv => ({ key, type: GgufValueType.STRING, value }),
  strs: (key: string, value: string[]): Kv => ({ key, type: GgufValueType.ARRAY, elementType: GgufValueType.STRING, value }),
  i32s: (key: string, value: number[]): Kv => ({ key, type: GgufValueType.ARRAY, elementType: GgufValueType.INT32, value }),
};

class Bytes {
  private chunks: Buffer[] = [];
  length = 0;
  push(b: Buffer): void {
    this.chunks.push(b);
    this.length += b.length;
  }
  u8(v: number) {
    const b = Buffer.alloc(1);
    b.writeUInt8(v);
    this.push(b);
  }
  u32(v: number) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.push(b);
  }
  u64(v: number | bigint) {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.push(b);
  }
  str(s: string) {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.push(b);
  }
  pad(alignment: number) {
    const n = (alignment - (this.length % alignment)) % alignment;
    if (n) this.push(Buffer.alloc(n));
  }
  concat(): Buffer {
    return Buffer.concat(this.chunks);
  }
}

function writeValue(out: Bytes, type: GgufValueType, value: unknown, elementType?: GgufValueType): void {
  const b8 = Buffer.alloc(8);
  switch (type) {
    case GgufValueType.UINT8:
      return out.u8(value as number);
    case GgufValueType.INT8:
      b8.writeInt8(value as number);
      return out.push(b8.subarray(0, 1));
    case GgufValueType.UINT16:
      b8.writeUInt16LE(value as number);
      return out.push(b8.subarray(0, 2));
    case GgufValueType.INT16:
      b8.writeInt16LE(value as number);
      return out.push(b8.subarray(0, 2));
    case GgufValueType.UINT32:
      return out.u32(value as number);
    case GgufValueType.INT32:
      b8.writeInt32LE(value as number);
      return out.push(b8.subarray(0, 4));
    case GgufValueType.FLOAT32:
      b8.writeFloatLE(value as number);
      return out.push(b8.subarray(0, 4));
    case GgufValueType.BOOL:
      return out.u8(value ? 1 : 0);
    case GgufValueType.STRING:
      return out.str(value as string);
    case GgufValueType.UINT64:
      return out.u64(value as bigint);
    case GgufValueType.INT64:
      b8.writeBigInt64LE(value as bigint);
      return out.push(b8);
    case GgufValueType.FLOAT64:
      b8.writeDoubleLE(value as number);
      return out.push(b8);
    case GgufValueType.ARRAY: {
      const items = value as unknown[];
      out.u32(elementType as number);
      out.u64(items.length);
      // Nested arrays are written as [elementType, items] pairs.
      for (const v of items)
        if (elementType === GgufValueType.ARRAY) {
          const [et, inner] = v as [GgufValueType, unknown[]];
          writeValue(out, GgufValueType.ARRAY, inner, et);
        } else writeValue(out, elementType as GgufValueType, v);
      return;
    }
    default:
      throw new Error(`writer: unknown type ${type}`);
  }
}

/** The bytes of a GGUF file; tensors are laid out in the given order, each aligned. */
export function writeGguf(spec: GgufSpec): Buffer {
  const alignment = spec.alignment ?? 32;
  const out = new Bytes();
  out.push(Buffer.from('GGUF', 'latin1'));
  out.u32(spec.version ?? 3);
  out.u64(spec.tensors.length);
  const metadata = [...spec.metadata];
  if (spec.alignment !== undefined && !metadata.some((m) => m.key === 'general.alignment'))
    metadata.push({ key: 'general.alignment', type: GgufValueType.UINT32, value: alignment });
  out.u64(metadata.length);
  for (const m of metadata) {
    out.str(m.key);
    out.u32(m.type);
    writeValue(out, m.type, m.value, m.elementType);
  }
  let offset = 0;
  const offsets: number[] = [];
  for (const t of spec.tensors) {
    offsets.push(offset);
    offset += Math.ceil(t.data.length / alignment) * alignment;
  }
  spec.tensors.forEach((t, i) => {
    out.str(t.name);
    out.u32(t.dims.length);
    for (const d of t.dims) out.u64(d);
    out.u32(t.type);
    out.u64(offsets[i]);
  });
  out.pad(alignment);
  for (const t of spec.tensors) {
    out.push(Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
    out.pad(alignment);
  }
  return out.concat();
}
