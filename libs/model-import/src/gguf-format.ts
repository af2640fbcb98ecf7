// The constants of the GGUF file format (ggml/docs/gguf.md, ggml/include/gguf.h and ggml.h):
// metadata value types, ggml tensor types and their block layouts.

/** "GGUF" read as a little-endian u32. */
export const GGUF_MAGIC = 0x46554747;
export const GGUF_DEFAULT_ALIGNMENT = 32;
/** GGML_MAX_DIMS: a tensor has 1 to 4 dimensions. */
export const GGUF_MAX_DIMS = 4;

export enum GgufValueType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

/** Size in bytes of a fixed-size metadata value (strings and arrays have none). */
export const VALUE_SIZE: Partial<Record<GgufValueType, number>> = {
  [GgufValueType.UINT8]: 1,
  [GgufValueType.INT8]: 1,
  [GgufValueType.UINT16]: 2,
  [GgufValueType.INT16]: 2,
  [GgufValueType.UINT32]: 4,
  [GgufValueType.INT32]: 4,
  [GgufValueType.FLOAT32]: 4,
  [GgufValueType.BOOL]: 1,
  [GgufValueType.UINT64]: 8,
  [GgufValueType.INT64]: 8,
  [GgufValueType.FLOAT64]: 8,
};

export interface GgmlTypeInfo {
  name: string;
  /** Elements per block (1 for plain types, 32 or 256 for quantized ones). */
  blockSize: number;
  /** Bytes per block. */
  typeSize: number;
}

/**
 * Every ggml type a GGUF file may name (ids are fixed by ggml.h; 4, 5 and 31-33, 36-38 were
 * removed upstream). Sizes are those of ggml-common.h's block structs, so the layout of a file
 * can be checked even where its values cannot be dequantized here.
 */
export const GGML_TYPES: ReadonlyMap<number, GgmlTypeInfo> = new Map([
  [0, { name: 'F32', blockSize: 1, typeSize: 4 }],
  [1, { name: 'F16', blockSize: 1, typeSize: 2 }],
  [2, { name: 'Q4_0', blockSize: 32, typeSize: 18 }], // fp16 d + 16 bytes of nibbles
  [3, { name: 'Q4_1', blockSize: 32, typeSize: 20 }], // fp16 d, fp16 m + 16 bytes of nibbles
  [6, { name: 'Q5_0', blockSize: 32, typeSize: 22 }],
  [7, { name: 'Q5_1', blockSize: 32, typeSize: 24 }],
  [8, { name: 'Q8_0', blockSize: 32, typeSize: 34 }], // fp16 d + 32 int8
  [9, { name: 'Q8_1', blockSize: 32, typeSize: 36 }],
  [10, { name: 'Q2_K', blockSize: 256, typeSize: 84 }],
  [11, { name: 'Q3_K', blockSize: 256, typeSize: 110 }],
  [12, { name: 'Q4_K', blockSize: 256, typeSize: 144 }],
  [13, { name: 'Q5_K', blockSize: 256, typeSize: 176 }],
  [14, { name: 'Q6_K', blockSize: 256, typeSize: 210 }],
  [15, { name: 'Q8_K', blockSize: 256, typeSize: 292 }],
  [16, { name: 'IQ2_XXS', blockSize: 256, typeSize: 66 }],
  [17, { name: 'IQ2_XS', blockSize: 256, typeSize: 74 }],
  [18, { name: 'IQ3_XXS', blockSize: 256, typeSize: 98 }],
  [19, { name: 'IQ1_S', blockSize: 256, typeSize: 50 }],
  [20, { name: 'IQ4_NL', blockSize: 32, typeSize: 18 }],
  [21, { name: 'IQ3_S', blockSize: 256, typeSize: 110 }],
  [22, { name: 'IQ2_S', blockSize: 256, typeSize: 82 }],
  [23, { name: 'IQ4_XS', blockSize: 256, typeSize: 136 }],
  [24, { name: 'I8', blockSize: 1, typeSize: 1 }],
  [25, { name: 'I16', blockSize: 1, typeSize: 2 }],
  [26, { name: 'I32', blockSize: 1, typeSize: 4 }],
  [27, { name: 'I64', blockSize: 1, typeSize: 8 }],
  [28, { name: 'F64', blockSize: 1, typeSize: 8 }],
  [29, { name: 'IQ1_M', blockSize: 256, typeSize: 56 }],
  [30, { name: 'BF16', blockSize: 1, typeSize: 2 }],
  [34, { name: 'TQ1_0', blockSize: 256, typeSize: 54 }],
  [35, { name: 'TQ2_0', blockSize: 256, typeSize: 66 }],
  [39, { name: 'MXFP4', blockSize: 32, typeSize: 17 }],
]);

/** The ggml type ids this library dequantizes. */
export const GGML = { F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q8_0: 8, BF16: 30 } as const;

export function ggmlTypeName(type: number): string {
  return GGML_TYPES.get(type)?.name ?? `unknown type ${type}`;
}
