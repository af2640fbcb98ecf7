import { describe, expect, it } from 'vitest';
import { decodeTokenArray, encodeTokenArray, tokenArrayTransformer } from './token-bytea';

describe('token bytea codec', () => {
  it('writes little-endian 4-byte elements', () => {
    expect(encodeTokenArray(Int32Array.from([1, -1]))).toEqual(Buffer.from([1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]));
    expect(encodeTokenArray(Uint32Array.from([0x01020304]))).toEqual(Buffer.from([4, 3, 2, 1]));
    expect(encodeTokenArray(Float32Array.from([1]))).toEqual(Buffer.from([0, 0, 0x80, 0x3f]));
  });

  it('round-trips every float bit pattern, NaN payloads and -0 included', () => {
    const bits = Uint32Array.from([0x7fc00001, 0xffffffff, 0x80000000, 0x00000001, 0x7f800000, 0x3f800000]);
    const floats = new Float32Array(bits.buffer);
    const back = decodeTokenArray(Float32Array, encodeTokenArray(floats));
    expect(new Uint32Array(back.buffer)).toEqual(bits);
  });

  it('decodes from unaligned slices of a larger buffer (as drivers hand them out)', () => {
    const pool = Buffer.alloc(64);
    const slice = pool.subarray(3, 3 + 8);
    encodeTokenArray(Int32Array.from([7, -7])).copy(slice);
    const out = decodeTokenArray(Int32Array, slice);
    expect(Array.from(out)).toEqual([7, -7]);
    expect(out.byteOffset).toBe(0);
  });

  it('encodes views of a larger array and copies, so later edits do not leak in', () => {
    const whole = Int32Array.from([1, 2, 3, 4]);
    const encoded = encodeTokenArray(whole.subarray(1, 3));
    whole[1] = 99;
    expect(Array.from(decodeTokenArray(Int32Array, encoded))).toEqual([2, 3]);
  });

  it('rejects a byte length that is not a whole number of elements', () => {
    expect(() => decodeTokenArray(Uint32Array, Buffer.alloc(6))).toThrow(/not a whole number of Uint32Array elements/);
  });

  it('maps null through the column transformer', () => {
    const t = tokenArrayTransformer(Int32Array);
    expect(t.to(null)).toBeNull();
    expect(t.from(null)).toBeNull();
    expect(Array.from(t.from(t.to(Int32Array.from([5]))) as Int32Array)).toEqual([5]);
  });
});
