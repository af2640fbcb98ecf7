import { ContractError } from '../errors';

/**
 * Binary frame for events that carry token arrays.
 *
 * JSON number arrays cost ~7-10 bytes a token and a parse per element; a 256k-token call
 * with logprobs and versions would be ~7 MB of JSON. The frame keeps the readable parts as
 * JSON and moves every typed array into a little-endian binary section (12 bytes a token for
 * ids + logprob + version), which any language can read with the published JSON Schema:
 *
 *   offset 0   4 bytes  magic "ANV1"
 *   offset 4   u32 LE   header length H
 *   offset 8   H bytes  UTF-8 JSON header: {"v":1,"blobs":[{"dtype","length","offset"}...],"body":...}
 *   then       blobs, each starting at an 8-byte aligned offset relative to the blob section
 *
 * Inside "body" a typed array is replaced by {"$bin": index} pointing into "blobs".
 */
export const FRAME_MAGIC = 'ANV1';
const MAGIC_BYTES = Buffer.from(FRAME_MAGIC, 'ascii');

export type Dtype = 'i32' | 'u32' | 'f32' | 'u16' | 'u8';
export type TypedArray = Int32Array | Uint32Array | Float32Array | Uint16Array | Uint8Array;

interface BlobRef {
  dtype: Dtype;
  length: number;
  offset: number;
}

const CTORS = {
  i32: Int32Array,
  u32: Uint32Array,
  f32: Float32Array,
  u16: Uint16Array,
  u8: Uint8Array,
} as const;

function dtypeOf(value: unknown): Dtype | null {
  if (value instanceof Int32Array) return 'i32';
  if (value instanceof Uint32Array) return 'u32';
  if (value instanceof Float32Array) return 'f32';
  if (value instanceof Uint16Array) return 'u16';
  if (value instanceof Uint8Array && !Buffer.isBuffer(value)) return 'u8';
  return null;
}

const align8 = (n: number) => (n + 7) & ~7;

export function encodeFrame(body: unknown): Buffer {
  const arrays: TypedArray[] = [];
  const blobs: BlobRef[] = [];
  let cursor = 0;
  const json = JSON.stringify(body, function replacer(this: unknown, _key, value) {
    // JSON.stringify calls toJSON-less typed arrays as objects; intercept them first.
    const dtype = dtypeOf(value);
    if (dtype === null) return value;
    const arr = value as TypedArray;
    blobs.push({ dtype, length: arr.length, offset: cursor });
    arrays.push(arr);
    cursor = align8(cursor + arr.byteLength);
    return { $bin: blobs.length - 1 };
  });
  // The body is serialised first (that fills `blobs`), then spliced into the header as text.
  const header = Buffer.from(`{"v":1,"blobs":${JSON.stringify(blobs)},"body":${json ?? 'null'}}`, 'utf8');
  const headerEnd = align8(8 + header.length);
  const out = Buffer.alloc(headerEnd + cursor);
  MAGIC_BYTES.copy(out, 0);
  out.writeUInt32LE(header.length, 4);
  header.copy(out, 8);
  arrays.forEach((arr, i) => {
    const src = Buffer.from(arr.buffer, arr.byteOffset, arr.byteLength);
    src.copy(out, headerEnd + blobs[i].offset);
  });
  return out;
}

export function isFrame(buf: Uint8Array): boolean {
  return buf.length >= 8 && buf[0] === 0x41 && buf[1] === 0x4e && buf[2] === 0x56 && buf[3] === 0x31;
}

export function decodeFrame(input: Uint8Array): unknown {
  const buf = Buffer.isBuffer(input) ? input : Buffer.from(input.buffer, input.byteOffset, input.byteLength);
  if (!isFrame(buf)) throw new ContractError('malformed_frame', 'missing ANV1 magic');
  const headerLength = buf.readUInt32LE(4);
  if (8 + headerLength > buf.length) throw new ContractError('malformed_frame', 'header runs past the end of the message');
  let header: { v?: unknown; blobs?: unknown; body?: unknown };
  try {
    header = JSON.parse(buf.toString('utf8', 8, 8 + headerLength));
  } catch (err) {
    throw new ContractError('malformed_frame', `header is not JSON (${(err as Error).message})`);
  }
  if (header.v !== 1) throw new ContractError('malformed_frame', `unsupported frame version ${String(header.v)}`);
  if (!Array.isArray(header.blobs)) throw new ContractError('malformed_frame', 'header.blobs must be an array');
  const base = align8(8 + headerLength);
  const arrays = header.blobs.map((ref: BlobRef, i: number) => {
    const Ctor = CTORS[ref?.dtype];
    if (!Ctor || !Number.isInteger(ref.length) || ref.length < 0 || !Number.isInteger(ref.offset) || ref.offset < 0) {
      throw new ContractError('malformed_frame', `blob ${i} has an invalid descriptor`);
    }
    const start = base + ref.offset;
    const byteLength = ref.length * Ctor.BYTES_PER_ELEMENT;
    if (start + byteLength > buf.length) throw new ContractError('malformed_frame', `blob ${i} runs past the end of the message`);
    // Copy into a fresh, aligned buffer: Kafka hands us slices of larger socket buffers
    // whose offsets are not aligned for Int32Array/Float32Array views.
    const out = new Ctor(ref.length);
    Buffer.from(out.buffer).set(buf.subarray(start, start + byteLength));
    return out;
  });
  return resolveBlobs(header.body, arrays);
}

function resolveBlobs(value: unknown, arrays: TypedArray[]): unknown {
  if (Array.isArray(value)) return value.map((v) => resolveBlobs(v, arrays));
  if (value === null || typeof value !== 'object') return value;
  const obj = value as Record<string, unknown>;
  if ('$bin' in obj) {
    const arr = arrays[obj.$bin as number];
    if (!arr) throw new ContractError('malformed_frame', `reference to missing blob ${String(obj.$bin)}`);
    return arr;
  }
  for (const key of Object.keys(obj)) obj[key] = resolveBlobs(obj[key], arrays);
  return obj;
}
