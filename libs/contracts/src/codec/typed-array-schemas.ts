import { z } from 'zod';
import type { Dtype } from './binary-frame';

/**
 * zod schemas for the typed arrays that travel in the binary section of a frame. The
 * `anvilBinary` meta key lets the JSON Schema generator describe them as blob references
 * (what a consumer in another language actually sees in the frame header).
 */
function typedArray<T>(ctor: abstract new (...args: never[]) => T, dtype: Dtype) {
  return z
    .custom<T>((v) => v instanceof (ctor as unknown as typeof Object), { message: `expected ${ctor.name}` })
    .meta({ anvilBinary: dtype });
}

export const int32Array = () => typedArray(Int32Array, 'i32');
export const uint32Array = () => typedArray(Uint32Array, 'u32');
export const float32Array = () => typedArray(Float32Array, 'f32');
export const uint8Array = () => typedArray(Uint8Array, 'u8');
