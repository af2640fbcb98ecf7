// Extracting one member of a zip archive (a Python wheel) with Node alone (APPNOTE.TXT):
// the end-of-central-directory record (and its zip64 form) locates the central directory, whose
// entry for the member gives its local header; the data is stored or deflated, streamed to a file
// and checked against the size and CRC-32 the archive records.
import { createReadStream, createWriteStream, promises as fsp } from 'node:fs';
import { Readable, Transform, type TransformCallback } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createInflateRaw } from 'node:zlib';

export class ZipError extends Error {
  override name = 'ZipError';
}

const EOCD = 0x06054b50;
const ZIP64_EOCD_LOCATOR = 0x07064b50;
const ZIP64_EOCD = 0x06064b50;
const CENTRAL = 0x02014b50;
const LOCAL = 0x04034b50;
const U32_MAX = 0xffffffff;

let crcTable: Uint32Array | null = null;

/** CRC-32 (IEEE 802.3, as zip uses it), continued from `crc`. */
export function crc32(data: Uint8Array, crc = 0): number {
  if (!crcTable) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      crcTable[n] = c >>> 0;
    }
  }
  let c = ~crc >>> 0;
  for (let i = 0; i < data.length; i++) c = crcTable[(c ^ data[i]) & 0xff] ^ (c >>> 8);
  return ~c >>> 0;
}

export interface ZipEntry {
  name: string;
  method: number;
  crc32: number;
  compressedSize: number;
  size: number;
  localHeaderOffset: number;
}

async function readAt(fh: fsp.FileHandle, position: number, length: number): Promise<Buffer> {
  const buf = Buffer.alloc(length);
  const { bytesRead } = await fh.read(buf, 0, length, position);
  if (bytesRead !== length) throw new ZipError(`truncated archive: ${length} bytes wanted at ${position}, ${bytesRead} read`);
  return buf;
}

/** The 64-bit values of a zip64 extra field, in the order of the 32-bit fields that overflowed. */
function zip64Values(extra: Buffer, count: number): number[] {
  for (let p = 0; p + 4 <= extra.length;) {
    const id = extra.readUInt16LE(p);
    const len = extra.readUInt16LE(p + 2);
    if (id === 0x0001) {
      const out: number[] = [];
      for (let i = 0; i < count && 8 * (i + 1) <= len; i++) out.push(Number(extra.readBigUInt64LE(p + 4 + 8 * i)));
      return out;
    }
    p += 4 + len;
  }
  return [];
}

/** The central directory of a zip archive. */
export async function listZip(path: string): Promise<ZipEntry[]> {
  const fh = await fsp.open(path, 'r');
  try {
    const { size } = await fh.stat();
    if (size < 22) throw new ZipError(`${path}: not a zip archive (${size} bytes)`);
    // The EOCD record is the last 22 bytes plus a comment of up to 65535 bytes.
    const tailLen = Math.min(size, 22 + 0xffff);
    const tail = await readAt(fh, size - tailLen, tailLen);
    let at = -1;
    for (let p = tailLen - 22; p >= 0; p--)
      if (tail.readUInt32LE(p) === EOCD) {
        at = p;
        break;
      }
    if (at < 0) throw new ZipError(`${path}: not a zip archive (no end-of-central-directory record)`);
    let count = tail.readUInt16LE(at + 10);
    let cdSize = tail.readUInt32LE(at + 12);
    let cdOffset = tail.readUInt32LE(at + 16);
    if (at >= 20 && tail.readUInt32LE(at - 20) === ZIP64_EOCD_LOCATOR) {
      const z = await readAt(fh, Number(tail.readBigUInt64LE(at - 20 + 8)), 56);
      if (z.readUInt32LE(0) !== ZIP64_EOCD) throw new ZipError(`${path}: corrupt zip64 end-of-central-directory record`);
      count = Number(z.readBigUInt64LE(32));
      cdSize = Number(z.readBigUInt64LE(40));
      cdOffset = Number(z.readBigUInt64LE(48));
    }
    if (cdOffset + cdSize > size) throw new ZipError(`${path}: the central directory lies past the end of the file`);
    const cd = await readAt(fh, cdOffset, cdSize);
    const entries: ZipEntry[] = [];
    for (let p = 0, i = 0; i < count; i++) {
      if (p + 46 > cd.length || cd.readUInt32LE(p) !== CENTRAL) throw new ZipError(`${path}: corrupt central directory (entry ${i})`);
      const nameLen = cd.readUInt16LE(p + 28);
      const extraLen = cd.readUInt16LE(p + 30);
      const commentLen = cd.readUInt16LE(p + 32);
      if (p + 46 + nameLen + extraLen + commentLen > cd.length) throw new ZipError(`${path}: corrupt central directory (entry ${i})`);
      const name = cd.toString('utf8', p + 46, p + 46 + nameLen);
      let compressedSize = cd.readUInt32LE(p + 20);
      let sz = cd.readUInt32LE(p + 24);
      let localHeaderOffset = cd.readUInt32LE(p + 42);
      const overflowed = [sz, compressedSize, localHeaderOffset].filter((v) => v === U32_MAX).length;
      if (overflowed) {
        const big = zip64Values(cd.subarray(p + 46 + nameLen, p + 46 + nameLen + extraLen), overflowed);
        if (big.length !== overflowed) throw new ZipError(`${path}: ${name}: missing zip64 sizes`);
        let k = 0;
        if (sz === U32_MAX) sz = big[k++];
        if (compressedSize === U32_MAX) compressedSize = big[k++];
        if (localHeaderOffset === U32_MAX) localHeaderOffset = big[k++];
      }
      entries.push({ name, method: cd.readUInt16LE(p + 10), crc32: cd.readUInt32LE(p + 16), compressedSize, size: sz, localHeaderOffset });
      p += 46 + nameLen + extraLen + commentLen;
    }
    return entries;
  } finally {
    await fh.close();
  }
}

/** Counts bytes and computes the CRC-32 of what passes through. */
class Checked extends Transform {
  crc = 0;
  bytes = 0;
  constructor(private readonly limit: number) {
    super();
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.bytes += chunk.length;
    if (this.bytes > this.limit) return cb(new ZipError(`the member inflates past its recorded size ${this.limit}`));
    this.crc = crc32(chunk, this.crc);
    cb(null, chunk);
  }
}

/** Writes member `name` of the archive to `dest`, checking its size and CRC-32. */
export async function extractZipEntry(path: string, name: string, dest: string): Promise<ZipEntry> {
  const entry = (await listZip(path)).find((e) => e.name === name);
  if (!entry) throw new ZipError(`${path}: has no member ${name}`);
  if (entry.method !== 0 && entry.method !== 8)
    throw new ZipError(`${path}: ${name} uses compression method ${entry.method} (only stored and deflated are supported)`);
  const fh = await fsp.open(path, 'r');
  let dataStart: number;
  try {
    const local = await readAt(fh, entry.localHeaderOffset, 30);
    if (local.readUInt32LE(0) !== LOCAL) throw new ZipError(`${path}: ${name}: corrupt local header`);
    dataStart = entry.localHeaderOffset + 30 + local.readUInt16LE(26) + local.readUInt16LE(28);
    const { size } = await fh.stat();
    if (dataStart + entry.compressedSize > size) throw new ZipError(`${path}: ${name}: data runs past the end of the archive`);
  } finally {
    await fh.close();
  }
  const check = new Checked(entry.size);
  const source =
    entry.compressedSize === 0
      ? Readable.from([])
      : createReadStream(path, { start: dataStart, end: dataStart + entry.compressedSize - 1 });
  const sink = createWriteStream(dest, { flags: 'wx' });
  if (entry.method === 8 && entry.compressedSize > 0) await pipeline(source, createInflateRaw(), check, sink);
  else await pipeline(source, check, sink);
  if (check.bytes !== entry.size) throw new ZipError(`${path}: ${name}: ${check.bytes} bytes extracted, ${entry.size} recorded`);
  if (check.crc !== entry.crc32) throw new ZipError(`${path}: ${name}: CRC-32 mismatch (the archive is corrupt)`);
  return entry;
}
