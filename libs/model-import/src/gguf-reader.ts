// A validating GGUF reader (versions 2 and 3, little-endian), after ggml/docs/gguf.md:
//   u32 magic "GGUF" | u32 version | u64 tensor_count | u64 metadata_kv_count
//   metadata_kv_count × { string key | u32 value_type | value }
//   tensor_count × { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32) | tensor data (each offset relative to here, aligned)
// where string = u64 length + UTF-8 bytes and an array value = u32 element type + u64 count + elements.
// Every count, length and offset is checked against the file's size before it is used, so a
// truncated or corrupt file fails with a GgufError that says what and where, never a RangeError
// or a huge allocation.
import { isUtf8 } from 'node:buffer';
import { promises as fsp } from 'node:fs';
import { GGML_TYPES, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_MAX_DIMS, GgufValueType, VALUE_SIZE } from './gguf-format';

export class GgufError extends Error {
  override name = 'GgufError';
}

export type GgufValue = number | bigint | boolean | string | GgufValue[];

export interface GgufMetadataEntry {
  type: GgufValueType;
  /** For arrays: the type of the elements. */
  elementType?: GgufValueType;
  /** 64-bit integers are bigints; every other number is a number; arrays are JS arrays. */
  value: GgufValue;
}

export interface GgufTensorInfo {
  name: string;
  /** ggml's ne[]: dims[0] is the innermost (contiguous) dimension, the reverse of PyTorch's shape. */
  dims: number[];
  /** ggml type id (GGML_TYPES). */
  type: number;
  typeName: string;
  /** Offset of the tensor's data from the start of the data section. */
  offset: number;
  byteLength: number;
  numel: number;
}

export interface GgufHeader {
  version: number;
  alignment: number;
  metadata: Map<string, GgufMetadataEntry>;
  tensors: GgufTensorInfo[];
  /** Absolute file offset of the data section. */
  dataOffset: number;
  fileSize: number;
}

/** Thrown inside the parser when the window of the file read so far ends before the header does. */
class NeedMoreBytes extends Error {}

const MAX_ARRAY_DEPTH = 8;
const SUPPORTED_VERSIONS = [2, 3];

class Cursor {
  pos = 0;
  private readonly view: DataView;

  constructor(
    private readonly buf: Buffer,
    private readonly fileSize: number,
    private readonly source: string,
  ) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }

  fail(msg: string, at = this.pos): never {
    throw new GgufError(`${this.source}: ${msg} (at byte ${at} of ${this.fileSize})`);
  }

  /** Bytes left in the whole file after the cursor. */
  get remaining(): number {
    return this.fileSize - this.pos;
  }

  need(n: number, what: string): void {
    if (n > this.remaining) this.fail(`truncated: ${what} needs ${n} bytes, ${this.remaining} left in the file`);
    if (this.pos + n > this.buf.length) throw new NeedMoreBytes();
  }

  u8(what: string): number {
    this.need(1, what);
    return this.view.getUint8(this.pos++);
  }

  u32(what: string): number {
    this.need(4, what);
    const v = this.view.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }

  u64(what: string): bigint {
    this.need(8, what);
    const v = this.view.getBigUint64(this.pos, true);
    this.pos += 8;
    return v;
  }

  /** A u64 that must fit a JS number (a length, count or offset). */
  size(what: string): number {
    const at = this.pos;
    const v = this.u64(what);
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) this.fail(`${what} ${v} is out of range`, at);
    return Number(v);
  }

  string(what: string): string {
    const at = this.pos;
    const n = this.size(`length of ${what}`);
    if (n > this.remaining) this.fail(`truncated or corrupt: ${what} is ${n} bytes long but ${this.remaining} bytes are left`, at);
    this.need(n, what);
    const bytes = this.buf.subarray(this.pos, this.pos + n);
    if (!isUtf8(bytes)) this.fail(`${what} is not valid UTF-8`, at);
    this.pos += n;
    return bytes.toString('utf8');
  }

  scalar(type: GgufValueType, what: string): GgufValue {
    const size = VALUE_SIZE[type];
    if (type === GgufValueType.STRING) return this.string(what);
    if (size === undefined) this.fail(`${what}: unknown value type ${type}`);
    this.need(size, what);
    const p = this.pos;
    this.pos += size;
    const v = this.view;
    switch (type) {
      case GgufValueType.UINT8:
        return v.getUint8(p);
      case GgufValueType.INT8:
        return v.getInt8(p);
      case GgufValueType.UINT16:
        return v.getUint16(p, true);
      case GgufValueType.INT16:
        return v.getInt16(p, true);
      case GgufValueType.UINT32:
        return v.getUint32(p, true);
      case GgufValueType.INT32:
        return v.getInt32(p, true);
      case GgufValueType.FLOAT32:
        return v.getFloat32(p, true);
      case GgufValueType.BOOL: {
        const b = v.getUint8(p);
        if (b > 1) this.fail(`${what}: a bool must be 0 or 1, got ${b}`, p);
        return b === 1;
      }
      case GgufValueType.UINT64:
        return v.getBigUint64(p, true);
      case GgufValueType.INT64:
        return v.getBigInt64(p, true);
      default:
        return v.getFloat64(p, true);
    }
  }

  value(type: GgufValueType, what: string, depth = 0): { value: GgufValue; elementType?: GgufValueType } {
    if (type !== GgufValueType.ARRAY) return { value: this.scalar(type, what) };
    if (depth >= MAX_ARRAY_DEPTH) this.fail(`${what}: arrays nested deeper than ${MAX_ARRAY_DEPTH}`);
    const at = this.pos;
    const elementType = this.u32(`element type of ${what}`) as GgufValueType;
    if (!(elementType in GgufValueType)) this.fail(`${what}: unknown array element type ${elementType}`, at);
    const count = this.size(`element count of ${what}`);
    // Every element takes at least this many bytes (a string or an array: its u64 length).
    const minSize = VALUE_SIZE[elementType] ?? (elementType === GgufValueType.ARRAY ? 12 : 8);
    if (count * minSize > this.remaining)
      this.fail(`truncated or corrupt: ${what} claims ${count} elements, more than the ${this.remaining} bytes left can hold`, at);
    const items: GgufValue[] = new Array(count);
    for (let i = 0; i < count; i++) items[i] = this.value(elementType, `${what}[${i}]`, depth + 1).value;
    return { value: items, elementType };
  }
}

function parseHeader(buf: Buffer, fileSize: number, source: string): GgufHeader {
  const c: Cursor = new Cursor(buf, fileSize, source);
  const magic = c.u32('magic');
  if (magic !== GGUF_MAGIC)
    c.fail(`not a GGUF file: magic is 0x${magic.toString(16).padStart(8, '0')}, expected 0x${GGUF_MAGIC.toString(16)} ("GGUF")`, 0);
  const version = c.u32('version');
  if (version > 0xffff && version >>> 24 <= 3)
    c.fail(`a big-endian GGUF file (version ${version >>> 24}); only little-endian files are supported`, 4);
  if (!SUPPORTED_VERSIONS.includes(version))
    c.fail(`GGUF version ${version} is not supported (supported: ${SUPPORTED_VERSIONS.join(', ')})`, 4);
  const tensorCount = c.size('tensor count');
  const kvCount = c.size('metadata count');
  // The smallest possible entries: a key-value pair is 8 + 4 + 1 bytes, a tensor info 8 + 4 + 8 + 4 + 8.
  if (kvCount * 13 + tensorCount * 32 > c.remaining)
    c.fail(`truncated or corrupt: ${kvCount} metadata entries and ${tensorCount} tensors cannot fit in the ${c.remaining} bytes left`, 8);

  const metadata = new Map<string, GgufMetadataEntry>();
  for (let i = 0; i < kvCount; i++) {
    const at = c.pos;
    const key = c.string(`metadata key #${i}`);
    if (metadata.has(key)) c.fail(`metadata key ${JSON.stringify(key)} appears twice`, at);
    const typeAt = c.pos;
    const type = c.u32(`value type of ${key}`) as GgufValueType;
    if (!(type in GgufValueType)) c.fail(`metadata ${key}: unknown value type ${type}`, typeAt);
    const { value, elementType } = c.value(type, `metadata ${key}`);
    metadata.set(key, elementType === undefined ? { type, value } : { type, elementType, value });
  }

  let alignment = GGUF_DEFAULT_ALIGNMENT;
  const al = metadata.get('general.alignment');
  if (al !== undefined) {
    if (typeof al.value !== 'number' || !Number.isInteger(al.value) || al.value <= 0 || (al.value & (al.value - 1)) !== 0)
      c.fail(`general.alignment must be a power of two, got ${String(al.value)}`);
    alignment = al.value;
  }

  const tensors: GgufTensorInfo[] = [];
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const at = c.pos;
    const name = c.string(`name of tensor #${i}`);
    if (names.has(name)) c.fail(`tensor ${name} appears twice`, at);
    names.add(name);
    const nDims = c.u32(`dimension count of ${name}`);
    if (nDims < 1 || nDims > GGUF_MAX_DIMS) c.fail(`tensor ${name}: ${nDims} dimensions (1 to ${GGUF_MAX_DIMS} allowed)`);
    const dims: number[] = [];
    let numel = 1;
    for (let d = 0; d < nDims; d++) {
      const n = c.size(`dimension ${d} of ${name}`);
      if (n < 1) c.fail(`tensor ${name}: dimension ${d} is ${n}`);
      numel *= n;
      if (!Number.isSafeInteger(numel)) c.fail(`tensor ${name}: [${dims.join(', ')}, ${n}, ...] has too many elements`);
      dims.push(n);
    }
    const typeAt = c.pos;
    const type = c.u32(`type of ${name}`);
    const info = GGML_TYPES.get(type);
    if (!info) c.fail(`tensor ${name}: unknown ggml type ${type}`, typeAt);
    if (dims[0] % info.blockSize !== 0)
      c.fail(`tensor ${name}: its first dimension ${dims[0]} is not a multiple of the ${info.name} block size ${info.blockSize}`);
    const offsetAt = c.pos;
    const offset = c.size(`data offset of ${name}`);
    if (offset % alignment !== 0) c.fail(`tensor ${name}: data offset ${offset} is not a multiple of the alignment ${alignment}`, offsetAt);
    const byteLength = (numel / info.blockSize) * info.typeSize;
    tensors.push({ name, dims, type, typeName: info.name, offset, byteLength, numel });
  }

  const dataOffset = Math.ceil(c.pos / alignment) * alignment;
  const dataSize = fileSize - dataOffset;
  if (tensors.length > 0 && dataSize < 0) c.fail(`truncated: the tensor data should start at byte ${dataOffset}`);
  // Tensors lie inside the data section and do not overlap.
  const byOffset = [...tensors].sort((a, b) => a.offset - b.offset);
  let end = 0;
  let prev = '';
  for (const t of byOffset) {
    if (t.offset < end) c.fail(`tensor ${t.name} (offset ${t.offset}) overlaps tensor ${prev} (which ends at ${end})`);
    end = t.offset + t.byteLength;
    prev = t.name;
    if (end > dataSize)
      c.fail(
        `truncated: tensor ${t.name} (${t.typeName} [${t.dims.join(', ')}]) ends at data offset ${end}, past the end of the file (the data section has ${Math.max(0, dataSize)} bytes)`,
        dataOffset + t.offset,
      );
  }
  return { version, alignment, metadata, tensors, dataOffset, fileSize };
}

/** Parses the header of a GGUF file held in memory (the whole file, or a prefix of a file of fileSize bytes). */
export function parseGgufHeader(buf: Buffer, fileSize = buf.length, source = 'GGUF'): GgufHeader {
  try {
    return parseHeader(buf, fileSize, source);
  } catch (e) {
    if (e instanceof NeedMoreBytes) throw new GgufError(`${source}: the header does not fit in the first ${buf.length} bytes given`);
    throw e;
  }
}

/** An open GGUF file: its header, and its tensors' bytes read on demand. */
export class GgufFile implements GgufHeader {
  readonly version: number;
  readonly alignment: number;
  readonly metadata: Map<string, GgufMetadataEntry>;
  readonly tensors: GgufTensorInfo[];
  readonly dataOffset: number;
  readonly fileSize: number;

  private constructor(
    header: GgufHeader,
    readonly path: string,
    private readonly fh: fsp.FileHandle | null,
    private readonly memory: Buffer | null,
  ) {
    this.version = header.version;
    this.alignment = header.alignment;
    this.metadata = header.metadata;
    this.tensors = header.tensors;
    this.dataOffset = header.dataOffset;
    this.fileSize = header.fileSize;
  }

  /** Opens and validates a GGUF file; only the header is read (the window grows until it fits). */
  static async open(path: string): Promise<GgufFile> {
    const fh = await fsp.open(path, 'r');
    try {
      const { size } = await fh.stat();
      for (let window = Math.min(size, 4 << 20); ; window = Math.min(size, window * 2)) {
        const buf = Buffer.alloc(window);
        const { bytesRead } = await fh.read(buf, 0, window, 0);
        if (bytesRead !== window) throw new GgufError(`${path}: short read (${bytesRead} of ${window} bytes)`);
        try {
          return new GgufFile(parseHeader(buf, size, path), path, fh, null);
        } catch (e) {
          if (!(e instanceof NeedMoreBytes) || window === size) throw e;
        }
      }
    } catch (e) {
      await fh.close();
      throw e;
    }
  }

  /** A GGUF file already in memory (tests, small files). */
  static fromBuffer(buf: Buffer, source = 'GGUF'): GgufFile {
    return new GgufFile(parseGgufHeader(buf, buf.length, source), source, null, buf);
  }

  tensor(name: string): GgufTensorInfo | undefined {
    return this.tensors.find((t) => t.name === name);
  }

  /** The raw bytes of one tensor, in ggml's layout. */
  async tensorBytes(t: GgufTensorInfo): Promise<Buffer> {
    const at = this.dataOffset + t.offset;
    if (this.memory) return this.memory.subarray(at, at + t.byteLength);
    if (!this.fh) throw new GgufError(`${this.path}: closed`);
    const buf = Buffer.alloc(t.byteLength);
    let done = 0;
    while (done < t.byteLength) {
      const { bytesRead } = await this.fh.read(buf, done, t.byteLength - done, at + done);
      if (bytesRead === 0) throw new GgufError(`${this.path}: tensor ${t.name}: the file ended while reading it (was it truncated since?)`);
      done += bytesRead;
    }
    return buf;
  }

  async close(): Promise<void> {
    await this.fh?.close();
  }
}
