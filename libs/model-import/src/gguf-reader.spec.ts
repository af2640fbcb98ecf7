import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { GgufValueType } from './gguf-format';
import { GgufError, GgufFile, parseGgufHeader } from './gguf-reader';
import { kv, writeGguf, type GgufSpec, type Kv } from './testing';

const dir = mkdtempSync(join(tmpdir(), 'gguf-reader-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const T = GgufValueType;

function small(over: Partial<GgufSpec> = {}): GgufSpec {
  return {
    metadata: [kv.str('general.architecture', 'llama'), kv.u32('llama.block_count', 2)],
    tensors: [
      { name: 'a', dims: [4, 2], type: 0, data: new Uint8Array(32).map((_, i) => i) },
      { name: 'b', dims: [32], type: 8, data: new Uint8Array(34).fill(7) },
    ],
    ...over,
  };
}

// Byte offsets in a written file: magic 0, version 4, tensor count 8, metadata count 16, then the
// first key (u64 length at 24, its bytes at 32); for a one-letter key its type is at 33, its value at 37.

/** A copy of buf with the u64 at `at` replaced. */
function patchU64(buf: Buffer, at: number, v: bigint): Buffer {
  const b = Buffer.from(buf);
  b.writeBigUInt64LE(v, at);
  return b;
}

const parse = (b: Buffer) => parseGgufHeader(b, b.length, 'test.gguf');

describe('GGUF reader: what it reads', () => {
  it('reads every metadata value type, arrays of each, nested arrays, in versions 2 and 3', () => {
    const metadata: Kv[] = [
      { key: 'u8', type: T.UINT8, value: 250 },
      { key: 'i8', type: T.INT8, value: -100 },
      { key: 'u16', type: T.UINT16, value: 65000 },
      { key: 'i16', type: T.INT16, value: -30000 },
      { key: 'u32', type: T.UINT32, value: 4_000_000_000 },
      { key: 'i32', type: T.INT32, value: -2_000_000_000 },
      { key: 'f32', type: T.FLOAT32, value: 0.25 },
      { key: 'bool', type: T.BOOL, value: true },
      { key: 'str', type: T.STRING, value: 'héllo 日本 😀' },
      { key: 'u64', type: T.UINT64, value: 2n ** 63n + 5n },
      { key: 'i64', type: T.INT64, value: -(2n ** 62n) },
      { key: 'f64', type: T.FLOAT64, value: Math.PI },
      { key: 'arr.u8', type: T.ARRAY, elementType: T.UINT8, value: [1, 2, 3] },
      { key: 'arr.i16', type: T.ARRAY, elementType: T.INT16, value: [-1, 2] },
      { key: 'arr.f32', type: T.ARRAY, elementType: T.FLOAT32, value: [1.5, -2.5] },
      { key: 'arr.bool', type: T.ARRAY, elementType: T.BOOL, value: [true, false] },
      { key: 'arr.str', type: T.ARRAY, elementType: T.STRING, value: ['a', '', 'Ġb'] },
      { key: 'arr.i64', type: T.ARRAY, elementType: T.INT64, value: [-3n, 4n] },
      { key: 'arr.f64', type: T.ARRAY, elementType: T.FLOAT64, value: [0.1] },
      { key: 'arr.empty', type: T.ARRAY, elementType: T.UINT32, value: [] },
      {
        key: 'arr.nested',
        type: T.ARRAY,
        elementType: T.ARRAY,
        value: [
          [T.INT32, [1, 2]],
          [T.STRING, ['x']],
        ],
      },
    ];
    for (const version of [2, 3]) {
      const h = parse(writeGguf({ version, metadata, tensors: [] }));
      expect(h.version).toBe(version);
      const v = (k: string) => h.metadata.get(k)?.value;
      expect([v('u8'), v('i8'), v('u16'), v('i16'), v('u32'), v('i32')]).toEqual([250, -100, 65000, -30000, 4_000_000_000, -2_000_000_000]);
      expect([v('f32'), v('bool'), v('str'), v('f64')]).toEqual([0.25, true, 'héllo 日本 😀', Math.PI]);
      expect([v('u64'), v('i64')]).toEqual([2n ** 63n + 5n, -(2n ** 62n)]);
      expect(v('arr.u8')).toEqual([1, 2, 3]);
      expect(v('arr.i16')).toEqual([-1, 2]);
      expect(v('arr.f32')).toEqual([1.5, -2.5]);
      expect(v('arr.bool')).toEqual([true, false]);
      expect(v('arr.str')).toEqual(['a', '', 'Ġb']);
      expect(v('arr.i64')).toEqual([-3n, 4n]);
      expect(v('arr.f64')).toEqual([0.1]);
      expect(v('arr.empty')).toEqual([]);
      expect(v('arr.nested')).toEqual([[1, 2], ['x']]);
      expect(h.metadata.get('arr.str')?.elementType).toBe(T.STRING);
      expect(h.metadata.get('u64')?.type).toBe(T.UINT64);
    }
  });

  it('reads tensor infos and data, honouring general.alignment', async () => {
    for (const alignment of [32, 64, 8]) {
      const spec = small({ alignment });
      const buf = writeGguf(spec);
      const f = GgufFile.fromBuffer(buf);
      expect(f.alignment).toBe(alignment);
      expect(f.dataOffset % alignment).toBe(0);
      expect(f.tensors.map((t) => [t.name, t.dims, t.typeName, t.numel, t.byteLength, t.offset % alignment])).toEqual([
        ['a', [4, 2], 'F32', 8, 32, 0],
        ['b', [32], 'Q8_0', 32, 34, 0],
      ]);
      for (const [i, t] of f.tensors.entries()) expect([...(await f.tensorBytes(t))]).toEqual([...spec.tensors[i].data]);
    }
  });

  it('opens a file from disk whose header is larger than the first window it reads', async () => {
    const big = Array.from({ length: 300_000 }, (_, i) => `token-${i}-${'x'.repeat(10)}`); // ~7.5 MB of metadata
    const spec = small({ metadata: [kv.strs('tokenizer.ggml.tokens', big)] });
    const path = join(dir, 'big.gguf');
    writeFileSync(path, writeGguf(spec));
    const f = await GgufFile.open(path);
    try {
      expect((f.metadata.get('tokenizer.ggml.tokens')?.value as string[]).length).toBe(300_000);
      expect([...(await f.tensorBytes(f.tensors[1]))]).toEqual([...spec.tensors[1].data]);
    } finally {
      await f.close();
    }
  });
});

describe('GGUF reader: truncated or corrupt files fail with a clear GgufError', () => {
  const good = writeGguf(small());

  it('every truncation of a valid file is a GgufError (never a RangeError or a crash)', async () => {
    const h = parse(good);
    const end = h.dataOffset + Math.max(...h.tensors.map((t) => t.offset + t.byteLength)); // the padding after it is optional
    for (let n = 0; n < end; n++) {
      const cut = good.subarray(0, n);
      let err: unknown;
      try {
        parse(Buffer.from(cut));
      } catch (e) {
        err = e;
      }
      expect(err, `cut at ${n}`).toBeInstanceOf(GgufError);
      expect((err as Error).message, `cut at ${n}`).toMatch(n < 4 ? /truncated/ : /truncated|not a GGUF/);
    }
    const path = join(dir, 'cut.gguf');
    writeFileSync(path, good.subarray(0, good.length - 40));
    await expect(GgufFile.open(path)).rejects.toThrow(/truncated: tensor b \(Q8_0 \[32\]\) ends at data offset/);
  });

  it('names what is wrong', () => {
    const cases: Array<[string, Buffer, RegExp]> = [
      ['bad magic', Buffer.concat([Buffer.from('GGML'), good.subarray(4)]), /not a GGUF file: magic is 0x4c4d4747/],
      ['version 1', writeGguf({ ...small(), version: 1 }), /GGUF version 1 is not supported \(supported: 2, 3\)/],
      ['version 4', writeGguf({ ...small(), version: 4 }), /GGUF version 4 is not supported/],
      ['big-endian', Buffer.concat([good.subarray(0, 4), Buffer.from([0, 0, 0, 3]), good.subarray(8)]), /big-endian GGUF/],
      ['tensor count past the end', patchU64(good, 8, 1n << 40n), /cannot fit in the \d+ bytes left/],
      ['metadata count past the end', patchU64(good, 16, 1n << 50n), /cannot fit/],
      ['count out of range', patchU64(good, 16, 1n << 63n), /metadata count \d+ is out of range/],
      ['string past the end', patchU64(good, 24, 1_000_000n), /metadata key #0 is 1000000 bytes long but \d+ bytes are left/],
      ['duplicate key', writeGguf(small({ metadata: [kv.u32('k', 1), kv.u32('k', 2)] })), /metadata key "k" appears twice/],
      [
        'unknown value type',
        writeGguf(small({ metadata: [{ key: 'k', type: T.UINT8, value: 0 }] })).fill(13, 33, 34),
        /metadata k: unknown value type 13/,
      ],
      [
        'unknown array element type',
        writeGguf(small({ metadata: [{ key: 'k', type: T.ARRAY, elementType: T.UINT8, value: [] }] })).fill(99, 37, 38),
        /unknown array element type 99/,
      ],
      [
        'array count past the end',
        patchU64(writeGguf(small({ metadata: [kv.i32s('k', [1, 2])] })), 41, 1n << 40n),
        /claims 1099511627776 elements/,
      ],
      [
        'bool not 0 or 1',
        writeGguf(small({ metadata: [{ key: 'k', type: T.BOOL, value: true }] })).fill(2, 37, 38),
        /a bool must be 0 or 1, got 2/,
      ],
      ['invalid UTF-8 key', writeGguf(small({ metadata: [kv.u32('kk', 1)] })).fill(0xff, 32, 33), /metadata key #0 is not valid UTF-8/],
      [
        'alignment not a power of two',
        writeGguf(small({ metadata: [kv.u32('general.alignment', 24)] })),
        /general.alignment must be a power of two, got 24/,
      ],
      [
        'unknown ggml type',
        writeGguf(small({ tensors: [{ name: 'x', dims: [4], type: 4, data: new Uint8Array(16) }] })),
        /tensor x: unknown ggml type 4/,
      ],
      [
        '5 dimensions',
        writeGguf(small({ tensors: [{ name: 'x', dims: [1, 1, 1, 1, 1], type: 0, data: new Uint8Array(4) }] })),
        /tensor x: 5 dimensions/,
      ],
      [
        'a zero dimension',
        writeGguf(small({ tensors: [{ name: 'x', dims: [4, 0], type: 0, data: new Uint8Array(0) }] })),
        /tensor x: dimension 1 is 0/,
      ],
      [
        'partial block',
        writeGguf(small({ tensors: [{ name: 'x', dims: [16], type: 2, data: new Uint8Array(18) }] })),
        /16 is not a multiple of the Q4_0 block size 32/,
      ],
      [
        'duplicate tensor',
        writeGguf(small({ tensors: [0, 1].map(() => ({ name: 'x', dims: [4], type: 0, data: new Uint8Array(16) })) })),
        /tensor x appears twice/,
      ],
    ];
    for (const [what, buf, re] of cases) expect(() => parse(buf), what).toThrow(re);
    for (const [what, buf] of cases) expect(() => parse(buf), what).toThrow(GgufError);
  });

  it('refuses tensor data offsets that are misaligned, out of range or overlapping', () => {
    const h = parse(good);
    // Offsets of tensor b's info: the last u64 before the data padding; rewrite it.
    const infoEnd = (buf: Buffer) => {
      const name = buf.indexOf(Buffer.from([1, 0, 0, 0, 0, 0, 0, 0, 0x62])); // the string "b" (u64 length 1)
      return name + 8 + 1 + 4 + 8 + 4; // name, n_dims, ne[0], type → the offset field
    };
    const at = infoEnd(good);
    expect(good.readBigUInt64LE(at)).toBe(BigInt(h.tensors[1].offset));
    expect(() => parse(patchU64(good, at, 33n))).toThrow(/tensor b: data offset 33 is not a multiple of the alignment 32/);
    expect(() => parse(patchU64(good, at, 1024n))).toThrow(/truncated: tensor b .* past the end of the file/);
    expect(() => parse(patchU64(good, at, 0n))).toThrow(/tensor b \(offset 0\) overlaps tensor a|tensor a \(offset 0\) overlaps tensor b/);
  });
});
