// Typed access to GGUF metadata: each getter names the key and what it found when the value is
// missing or of the wrong kind.
import { GgufValueType } from './gguf-format';
import { GgufError, type GgufMetadataEntry, type GgufValue } from './gguf-reader';

const INTEGER_TYPES = new Set([
  GgufValueType.UINT8,
  GgufValueType.INT8,
  GgufValueType.UINT16,
  GgufValueType.INT16,
  GgufValueType.UINT32,
  GgufValueType.INT32,
  GgufValueType.UINT64,
  GgufValueType.INT64,
]);

function describe(e: GgufMetadataEntry): string {
  const kind = GgufValueType[e.type] ?? String(e.type);
  if (e.type === GgufValueType.ARRAY) return `an array of ${GgufValueType[e.elementType ?? -1] ?? 'unknown'}`;
  return `${kind} ${JSON.stringify(typeof e.value === 'bigint' ? e.value.toString() : e.value)}`;
}

function toNumber(v: GgufValue, key: string): number {
  if (typeof v === 'bigint') {
    if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER))
      throw new GgufError(`metadata ${key}: ${v} is out of range`);
    return Number(v);
  }
  return v as number;
}

export class GgufMetadata {
  constructor(
    readonly entries: ReadonlyMap<string, GgufMetadataEntry>,
    private readonly source: string,
  ) {}

  has(key: string): boolean {
    return this.entries.has(key);
  }

  private fail(key: string, want: string, e?: GgufMetadataEntry): never {
    throw new GgufError(`${this.source}: metadata ${key} ${e ? `must be ${want}, got ${describe(e)}` : `is missing (${want} expected)`}`);
  }

  private entry(key: string, want: string, required: boolean): GgufMetadataEntry | undefined {
    const e = this.entries.get(key);
    if (e === undefined && required) this.fail(key, want);
    return e;
  }

  string(key: string): string;
  string(key: string, optional: 'optional'): string | undefined;
  string(key: string, optional?: 'optional'): string | undefined {
    const e = this.entry(key, 'a string', optional === undefined);
    if (e === undefined) return undefined;
    if (e.type !== GgufValueType.STRING) this.fail(key, 'a string', e);
    return e.value as string;
  }

  int(key: string): number;
  int(key: string, optional: 'optional'): number | undefined;
  int(key: string, optional?: 'optional'): number | undefined {
    const e = this.entry(key, 'an integer', optional === undefined);
    if (e === undefined) return undefined;
    if (!INTEGER_TYPES.has(e.type)) this.fail(key, 'an integer', e);
    return toNumber(e.value, key);
  }

  /** A float; integers are accepted too (some converters write rope_theta as one). */
  float(key: string): number;
  float(key: string, optional: 'optional'): number | undefined;
  float(key: string, optional?: 'optional'): number | undefined {
    const e = this.entry(key, 'a number', optional === undefined);
    if (e === undefined) return undefined;
    if (e.type === GgufValueType.FLOAT32) return shortestFloat32(e.value as number);
    if (e.type !== GgufValueType.FLOAT64 && !INTEGER_TYPES.has(e.type)) this.fail(key, 'a number', e);
    return toNumber(e.value, key);
  }

  bool(key: string, optional: 'optional'): boolean | undefined {
    const e = this.entry(key, 'a bool', optional === undefined);
    if (e === undefined) return undefined;
    if (e.type !== GgufValueType.BOOL) this.fail(key, 'a bool', e);
    return e.value as boolean;
  }

  strings(key: string): string[];
  strings(key: string, optional: 'optional'): string[] | undefined;
  strings(key: string, optional?: 'optional'): string[] | undefined {
    const e = this.entry(key, 'an array of strings', optional === undefined);
    if (e === undefined) return undefined;
    if (e.type !== GgufValueType.ARRAY || e.elementType !== GgufValueType.STRING) this.fail(key, 'an array of strings', e);
    return e.value as string[];
  }

  ints(key: string, optional: 'optional'): number[] | undefined {
    const e = this.entry(key, 'an array of integers', optional === undefined);
    if (e === undefined) return undefined;
    if (e.type !== GgufValueType.ARRAY || e.elementType === undefined || !INTEGER_TYPES.has(e.elementType))
      this.fail(key, 'an array of integers', e);
    return (e.value as GgufValue[]).map((v) => toNumber(v, key));
  }
}

/**
 * The shortest decimal that reads back as the same float32: GGUF stores hyperparameters such as
 * rms_norm_eps as float32, and config.json should say 1e-05, not 9.999999747378752e-06.
 */
export function shortestFloat32(x: number): number {
  if (!Number.isFinite(x)) return x;
  for (let digits = 1; digits <= 9; digits++) {
    const y = Number(x.toPrecision(digits));
    if (Math.fround(y) === x) return y;
  }
  return x;
}
