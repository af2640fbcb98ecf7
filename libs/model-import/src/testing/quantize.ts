// Reference quantizers for tests, after ggml-quants.c's quantize_row_*_ref (block size 32), and
// float32 → fp16 / bf16 conversions; plain code, independent of the library's dequantizers, so
// the tests check one against the other.

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** IEEE float32 → binary16 bits, round to nearest even (overflow to ±inf, NaN kept quiet). */
export function toHalfBits(x: number): number {
  f32[0] = x;
  const u = u32[0];
  const sign = (u >>> 16) & 0x8000;
  const exp = (u >>> 23) & 0xff;
  let mant = u & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    // A subnormal half: h × 2^-24 with h = (1.mant × 2^23) >> (14 - e), rounded.
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && h & 1)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && h & 1)) h++; // a carry into the exponent is the right rounding
  return sign | h;
}

/** binary16 bits → number (for computing expected values in tests). */
export function halfBitsToNumber(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 31) return m ? NaN : sign * Infinity;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

/** float32 → bfloat16 bits as ggml_compute_fp32_to_bf16: round to nearest even, NaN made quiet. */
export function toBf16Bits(x: number): number {
  f32[0] = x;
  const u = u32[0];
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 64) & 0xffff;
  return Math.floor((u + 0x7fff + ((u >>> 16) & 1)) / 65536) & 0xffff;
}

export function f32Bytes(x: Float32Array): Uint8Array {
  return new Uint8Array(x.buffer.slice(x.byteOffset, x.byteOffset + x.byteLength));
}

export function f16Bytes(x: Float32Array): Uint8Array {
  const b = Buffer.alloc(2 * x.length);
  x.forEach((v, i) => b.writeUInt16LE(toHalfBits(v), 2 * i));
  return b;
}

export function bf16Bytes(x: Float32Array): Uint8Array {
  const b = Buffer.alloc(2 * x.length);
  x.forEach((v, i) => b.writeUInt16LE(toBf16Bits(v), 2 * i));
  return b;
}

const QK = 32;
const fr = Math.fround;
/** C's roundf: halves away from zero. */
const roundf = (v: number) => Math.sign(v) * Math.floor(Math.abs(v) + 0.5);

function blocks(x: Float32Array): Float32Array[] {
  if (x.length % QK !== 0) throw new Error(`quantize: ${x.length} values are not whole blocks of ${QK}`);
  const out: Float32Array[] = [];
  for (let i = 0; i < x.length; i += QK) out.push(x.subarray(i, i + QK));
  return out;
}

/** Q8_0: d = max|x| / 127, q = round(x / d). */
export function quantizeQ8_0(x: Float32Array): Uint8Array {
  const b = Buffer.alloc((x.length / QK) * 34);
  blocks(x).forEach((blk, i) => {
    let amax = 0;
    for (const v of blk) amax = Math.max(amax, Math.abs(v));
    const d = fr(amax / 127);
    const id = d ? fr(1 / d) : 0;
    b.writeUInt16LE(toHalfBits(d), 34 * i);
    for (let j = 0; j < QK; j++) b.writeInt8(roundf(fr(blk[j] * id)), 34 * i + 2 + j);
  });
  return b;
}

/** Q4_0: d = (the value of largest magnitude) / -8, q = min(15, trunc(x / d + 8.5)); element j in the low nibble of byte j, j + 16 in its high nibble. */
export function quantizeQ4_0(x: Float32Array): Uint8Array {
  const b = Buffer.alloc((x.length / QK) * 18);
  blocks(x).forEach((blk, i) => {
    let amax = 0;
    let max = 0;
    for (const v of blk)
      if (amax < Math.abs(v)) {
        amax = Math.abs(v);
        max = v;
      }
    const d = fr(max / -8);
    const id = d ? fr(1 / d) : 0;
    b.writeUInt16LE(toHalfBits(d), 18 * i);
    for (let j = 0; j < QK / 2; j++) {
      const lo = Math.min(15, Math.trunc(fr(fr(blk[j] * id) + 8.5)));
      const hi = Math.min(15, Math.trunc(fr(fr(blk[j + QK / 2] * id) + 8.5)));
      b[18 * i + 2 + j] = lo | (hi << 4);
    }
  });
  return b;
}

/** Q4_1: d = (max - min) / 15, m = min, q = min(15, trunc((x - min) / d + 0.5)); nibbles as Q4_0. */
export function quantizeQ4_1(x: Float32Array): Uint8Array {
  const b = Buffer.alloc((x.length / QK) * 20);
  blocks(x).forEach((blk, i) => {
    let min = Infinity;
    let max = -Infinity;
    for (const v of blk) {
      min = Math.min(min, v);
      max = Math.max(max, v);
    }
    const d = fr((max - min) / 15);
    const id = d ? fr(1 / d) : 0;
    b.writeUInt16LE(toHalfBits(d), 20 * i);
    b.writeUInt16LE(toHalfBits(min), 20 * i + 2);
    for (let j = 0; j < QK / 2; j++) {
      const lo = Math.min(15, Math.trunc(fr(fr(fr(blk[j] - min) * id) + 0.5)));
      const hi = Math.min(15, Math.trunc(fr(fr(fr(blk[j + QK / 2] - min) * id) + 0.5)));
      b[20 * i + 4 + j] = lo | (hi << 4);
    }
  });
  return b;
}

/**
 * The largest error each type's quantization may make on a block (the rounding step, plus the
 * fp16 rounding of the scale and minimum), for checking dequantized values against their source.
 */
export function blockTolerance(type: 'F32' | 'F16' | 'BF16' | 'Q8_0' | 'Q4_0' | 'Q4_1', blk: Float32Array): number {
  let amax = 0;
  let min = Infinity;
  let max = -Infinity;
  for (const v of blk) {
    amax = Math.max(amax, Math.abs(v));
    min = Math.min(min, v);
    max = Math.max(max, v);
  }
  // fp16 keeps 11 significant bits, and below 2^-14 a fixed step of 2^-24: the rounding of a scale or minimum s.
  const r16 = (s: number) => Math.max(Math.abs(s) * 2 ** -11, 2 ** -25);
  switch (type) {
    case 'F32':
      return 0;
    case 'F16':
      return r16(amax);
    case 'BF16':
      return amax * 2 ** -8;
    case 'Q8_0': {
      const d = amax / 127;
      return 0.5 * d + 127 * r16(d) + 1e-12;
    }
    case 'Q4_0': {
      // The value of largest magnitude maps to -8·d exactly; its opposite end clips at +7·d, one whole step short.
      const d = amax / 8;
      return d + 8 * r16(d) + 1e-12;
    }
    case 'Q4_1': {
      const d = (max - min) / 15;
      return 0.5 * d + 15 * r16(d) + r16(min) + 1e-12;
    }
  }
}
