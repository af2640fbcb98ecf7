// Dequantization of ggml tensors to float32, block layouts exactly as ggml-common.h declares them
// and ggml-quants.c's dequantize_row_* reads them (QK = 32 elements per block):
//   Q8_0 { fp16 d; int8 qs[32] }          x[j] = qs[j] * d
//   Q4_0 { fp16 d; uint8 qs[16] }         x[j] = ((qs[j] & 0xf) - 8) * d,  x[j+16] = ((qs[j] >> 4) - 8) * d
//   Q4_1 { fp16 d; fp16 m; uint8 qs[16] } x[j] = (qs[j] & 0xf) * d + m,    x[j+16] = (qs[j] >> 4) * d + m
// i.e. the low nibbles of a block are its elements 0..15 and the high nibbles 16..31.
// Products of a small integer and an fp16 scale are exact in float32, so the results below equal
// ggml's bit for bit (the one rounding, of q*d + m, is float32's, as in C).
import { GGML, GGML_TYPES, ggmlTypeName } from './gguf-format';
import type { GgufTensorInfo } from './gguf-reader';

export class UnsupportedTensorTypeError extends Error {
  override name = 'UnsupportedTensorTypeError';
}

export const DEQUANTIZABLE = new Set<number>([GGML.F32, GGML.F16, GGML.BF16, GGML.Q8_0, GGML.Q4_0, GGML.Q4_1]);

const QK = 32;

let halfTable: Float32Array | null = null;

/** float32 value of every IEEE half-precision bit pattern (exact: every half is a float32). */
function halves(): Float32Array {
  if (halfTable) return halfTable;
  const t = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exp = (h >> 10) & 0x1f;
    const frac = h & 0x3ff;
    if (exp === 0) t[h] = sign * frac * 2 ** -24;
    else if (exp === 31) t[h] = frac ? NaN : sign * Infinity;
    else t[h] = sign * (1 + frac / 1024) * 2 ** (exp - 15);
  }
  halfTable = t;
  return t;
}

/** The message for a tensor this library cannot dequantize. */
export function unsupportedTypeMessage(t: Pick<GgufTensorInfo, 'name' | 'type'>): string {
  const supported = [...DEQUANTIZABLE].map(ggmlTypeName).join(', ');
  return `tensor ${t.name} has type ${ggmlTypeName(t.type)}, which cannot be imported (supported: ${supported}); re-quantize the model with one of those (llama-quantize), or convert it from the original weights`;
}

/**
 * The tensor's values as float32, in ggml's element order (dims[0] fastest). `bytes` holds
 * exactly the tensor's data (t.byteLength bytes).
 */
export function dequantize(t: Pick<GgufTensorInfo, 'name' | 'type' | 'numel' | 'byteLength'>, bytes: Uint8Array): Float32Array {
  const info = GGML_TYPES.get(t.type);
  if (!DEQUANTIZABLE.has(t.type) || !info) throw new UnsupportedTensorTypeError(unsupportedTypeMessage(t));
  const expected = (t.numel / info.blockSize) * info.typeSize;
  if (bytes.length !== expected || t.byteLength !== expected)
    throw new UnsupportedTensorTypeError(
      `tensor ${t.name}: ${bytes.length} bytes for ${t.numel} ${info.name} elements (expected ${expected})`,
    );
  const out = new Float32Array(t.numel);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = t.numel;
  switch (t.type) {
    case GGML.F32:
      for (let i = 0; i < n; i++) out[i] = view.getFloat32(4 * i, true);
      break;
    case GGML.F16: {
      const h = halves();
      for (let i = 0; i < n; i++) out[i] = h[view.getUint16(2 * i, true)];
      break;
    }
    case GGML.BF16: {
      // bfloat16 is the top half of a float32.
      const u32 = new Uint32Array(out.buffer);
      for (let i = 0; i < n; i++) u32[i] = view.getUint16(2 * i, true) << 16;
      break;
    }
    case GGML.Q8_0: {
      const h = halves();
      for (let b = 0, p = 0; b < n / QK; b++, p += 34) {
        const d = h[view.getUint16(p, true)];
        for (let j = 0; j < QK; j++) out[b * QK + j] = view.getInt8(p + 2 + j) * d;
      }
      break;
    }
    case GGML.Q4_0: {
      const h = halves();
      for (let b = 0, p = 0; b < n / QK; b++, p += 18) {
        const d = h[view.getUint16(p, true)];
        const o = b * QK;
        for (let j = 0; j < QK / 2; j++) {
          const q = bytes[p + 2 + j];
          out[o + j] = ((q & 0x0f) - 8) * d;
          out[o + j + QK / 2] = ((q >> 4) - 8) * d;
        }
      }
      break;
    }
    case GGML.Q4_1: {
      const h = halves();
      for (let b = 0, p = 0; b < n / QK; b++, p += 20) {
        const d = h[view.getUint16(p, true)];
        const m = h[view.getUint16(p + 2, true)];
        const o = b * QK;
        for (let j = 0; j < QK / 2; j++) {
          const q = bytes[p + 4 + j];
          out[o + j] = (q & 0x0f) * d + m;
          out[o + j + QK / 2] = (q >> 4) * d + m;
        }
      }
      break;
    }
  }
  return out;
}
