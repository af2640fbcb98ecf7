import type { ValueTransformer } from 'typeorm';

/**
 * Token arrays (prompt ids, output ids, logprobs, per-token policy versions) are stored as
 * bytea holding little-endian elements: 4 bytes a token instead of 7-10 for JSON or int[]
 * text, no per-element parsing, and bit-exact floats (a logprob is never printed and
 * re-parsed). The same layout as the ANV1 event frame, so bytes can move between them.
 */
export type TokenArray = Int32Array | Uint32Array | Float32Array;

export interface TokenArrayType<T extends TokenArray> {
  new (length: number): T;
  readonly BYTES_PER_ELEMENT: number;
  readonly name: string;
}

const HOST_IS_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

interface Accessors {
  read: (view: DataView, at: number) => number;
  write: (view: DataView, at: number, value: number) => void;
}
const ACCESSORS = new Map<TokenArrayType<TokenArray>, Accessors>([
  [Int32Array, { read: (v, at) => v.getInt32(at, true), write: (v, at, x) => v.setInt32(at, x, true) }],
  [Uint32Array, { read: (v, at) => v.getUint32(at, true), write: (v, at, x) => v.setUint32(at, x, true) }],
  [Float32Array, { read: (v, at) => v.getFloat32(at, true), write: (v, at, x) => v.setFloat32(at, x, true) }],
]);

/** Element access for big-endian hosts, where the bytes must be swapped one by one. */
function accessorsOf(type: TokenArrayType<TokenArray>): Accessors {
  const accessors = ACCESSORS.get(type);
  if (!accessors) throw new TypeError(`${type.name} is not a token array type`);
  return accessors;
}

/** A fresh Buffer with the elements in little-endian order (a copy: later edits to `values` do not leak in). */
export function encodeTokenArray(values: TokenArray): Buffer {
  const bytes = new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  if (HOST_IS_LITTLE_ENDIAN) return Buffer.from(bytes);
  const out = Buffer.alloc(values.byteLength);
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const { write } = accessorsOf(values.constructor as TokenArrayType<TokenArray>);
  for (let i = 0; i < values.length; i++) write(view, i * 4, values[i]);
  return out;
}

/**
 * A new typed array from little-endian bytes. Always copies: drivers hand back Buffers that
 * may be unaligned slices of a shared pool, which a typed array cannot view directly.
 */
export function decodeTokenArray<T extends TokenArray>(type: TokenArrayType<T>, bytes: Uint8Array): T {
  const size = type.BYTES_PER_ELEMENT;
  if (bytes.byteLength % size !== 0) {
    throw new RangeError(`${bytes.byteLength} bytes is not a whole number of ${type.name} elements`);
  }
  const out = new type(bytes.byteLength / size);
  if (HOST_IS_LITTLE_ENDIAN) {
    new Uint8Array(out.buffer).set(bytes);
    return out;
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const { read } = accessorsOf(type as TokenArrayType<TokenArray>);
  for (let i = 0; i < out.length; i++) out[i] = read(view, i * size);
  return out;
}

/** Column transformer: entity property is the typed array, the column is bytea. */
export function tokenArrayTransformer<T extends TokenArray>(type: TokenArrayType<T>): ValueTransformer {
  return {
    to: (value: T | null | undefined) => (value == null ? value : encodeTokenArray(value)),
    from: (value: Uint8Array | null) => (value == null ? value : decodeTokenArray(type, value)),
  };
}
