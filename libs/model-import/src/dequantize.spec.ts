import { describe, expect, it } from 'vitest';
import { dequantize, UnsupportedTensorTypeError } from './dequantize';
import { GgufFile } from './gguf-reader';
import { blockTolerance, encodeAs, halfBitsToNumber, toBf16Bits, toHalfBits, TYPE_IDS, writeGguf, type TestType } from './testing';

/** Seeded values with blocks of very different scales, a zero block, a constant block and one of a single outlier. */
function sample(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  const rnd = () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const block = Math.floor(i / 32);
    const scale = [1, 0.01, 30, 1e-3, 5][block % 5];
    x[i] = (rnd() * 2 - 1) * scale + (block % 7 === 3 ? 2 : 0);
  }
  x.fill(0, 64, 96); // an all-zero block
  x.fill(-0.75, 96, 128); // a constant block
  x.fill(0.001, 128, 160);
  x[140] = -9; // one outlier
  return x;
}

async function roundTrip(type: TestType, x: Float32Array, dims: number[]): Promise<Float32Array> {
  const f = GgufFile.fromBuffer(writeGguf({ metadata: [], tensors: [{ name: 'w', dims, type: TYPE_IDS[type], data: encodeAs(type, x) }] }));
  const t = f.tensors[0];
  return dequantize(t, await f.tensorBytes(t));
}

describe('dequantize: each type against its float source, within the type error', () => {
  const x = sample(64 * 32, 7);
  for (const type of ['F32', 'F16', 'BF16', 'Q8_0', 'Q4_0', 'Q4_1'] as const) {
    it(type, async () => {
      const y = await roundTrip(type, x, [64, 32]);
      expect(y.length).toBe(x.length);
      let worst = 0;
      for (let b = 0; b < x.length; b += 32) {
        const tol = blockTolerance(type, x.subarray(b, b + 32));
        for (let j = b; j < b + 32; j++) {
          const err = Math.abs(y[j] - x[j]);
          worst = Math.max(worst, err / (tol || 1));
          expect(err, `${type} element ${j} (${x[j]} → ${y[j]})`).toBeLessThanOrEqual(tol);
        }
      }
      if (type === 'F32') expect([...y]).toEqual([...x]);
      // The error bound is not vacuous: the quantized types use a real part of it.
      if (type.startsWith('Q')) expect(worst).toBeGreaterThan(0.2);
    });
  }

  it('F16 and BF16 decode to exactly the value their bits stand for', async () => {
    const y16 = await roundTrip('F16', x, [x.length]);
    const yb = await roundTrip('BF16', x, [x.length]);
    for (let i = 0; i < x.length; i++) {
      expect(y16[i]).toBe(halfBitsToNumber(toHalfBits(x[i])));
      expect(yb[i]).toBe(new Float32Array(new Uint32Array([toBf16Bits(x[i]) << 16]).buffer)[0]);
    }
  });

  it('Q4_0 and Q4_1 put elements 0..15 in the low nibbles and 16..31 in the high ones', () => {
    // One block by hand: d = 0.5 (fp16 0x3800), m = -1 (0xbc00); byte j = (j & 0xf) | (15 - j) << 4.
    const q4_0 = Buffer.alloc(18);
    const q4_1 = Buffer.alloc(20);
    q4_0.writeUInt16LE(0x3800, 0);
    q4_1.writeUInt16LE(0x3800, 0);
    q4_1.writeUInt16LE(0xbc00, 2);
    for (let j = 0; j < 16; j++) q4_0[2 + j] = q4_1[4 + j] = j | ((15 - j) << 4);
    const a = dequantize({ name: 't', type: TYPE_IDS.Q4_0, numel: 32, byteLength: 18 }, q4_0);
    const b = dequantize({ name: 't', type: TYPE_IDS.Q4_1, numel: 32, byteLength: 20 }, q4_1);
    for (let j = 0; j < 16; j++) {
      expect(a[j]).toBe((j - 8) * 0.5);
      expect(a[j + 16]).toBe((15 - j - 8) * 0.5);
      expect(b[j]).toBe(j * 0.5 - 1);
      expect(b[j + 16]).toBe((15 - j) * 0.5 - 1);
    }
    const q8 = Buffer.alloc(34);
    q8.writeUInt16LE(0x3400, 0); // 0.25
    for (let j = 0; j < 32; j++) q8.writeInt8(j * 8 - 128, 2 + j);
    const c = dequantize({ name: 't', type: TYPE_IDS.Q8_0, numel: 32, byteLength: 34 }, q8);
    for (let j = 0; j < 32; j++) expect(c[j]).toBe((j * 8 - 128) * 0.25);
  });

  it('names the tensor and its type for anything else (K-quants, IQ, ...)', () => {
    const cases: Array<[number, string, number]> = [
      [12, 'Q4_K', 144],
      [14, 'Q6_K', 210],
      [6, 'Q5_0', 22],
      [16, 'IQ2_XXS', 66],
      [20, 'IQ4_NL', 18],
    ];
    for (const [type, name, bytes] of cases) {
      const t = { name: 'blk.3.ffn_down.weight', type, numel: type >= 10 && type !== 20 ? 256 : 32, byteLength: bytes };
      expect(() => dequantize(t, new Uint8Array(bytes))).toThrow(UnsupportedTensorTypeError);
      expect(() => dequantize(t, new Uint8Array(bytes))).toThrow(
        new RegExp(
          `tensor blk\\.3\\.ffn_down\\.weight has type ${name}, which cannot be imported \\(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1\\)`,
        ),
      );
    }
  });

  it('refuses data whose length does not match the tensor', () => {
    expect(() => dequantize({ name: 'w', type: TYPE_IDS.Q8_0, numel: 64, byteLength: 68 }, new Uint8Array(34))).toThrow(
      /34 bytes for 64 Q8_0 elements/,
    );
  });

  it('test support: the reference fp16 conversion round-trips every half exactly', () => {
    for (let h = 0; h < 65536; h++) {
      const v = halfBitsToNumber(h);
      if (Number.isNaN(v)) continue;
      expect(toHalfBits(v)).toBe(h);
    }
    expect(toHalfBits(65520)).toBe(0x7c00); // rounds up to infinity
    expect(toHalfBits(1 + 2 ** -11)).toBe(0x3c00); // a tie rounds to even
    expect(toHalfBits(1 + 3 * 2 ** -11)).toBe(0x3c02);
  });
});
