/** Why the scheduler refused an input. `field` names the bad field (config key, argument, id). */
export type SchedulingErrorCode =
  | 'invalid_config'
  | 'invalid_argument'
  | 'unknown_id'
  | 'duplicate_id'
  | 'duplicate_position'
  | 'stale_position'
  | 'invalid_transition'
  | 'invalid_state';

export class SchedulingError extends Error {
  override name = 'SchedulingError';
  constructor(
    readonly code: SchedulingErrorCode,
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
}

export function requireInt(
  field: string,
  v: unknown,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
  code: SchedulingErrorCode = 'invalid_argument',
): number {
  if (typeof v !== 'number' || !Number.isInteger(v)) throw new SchedulingError(code, field, `must be an integer, got ${String(v)}`);
  if (v < min || v > max) throw new SchedulingError(code, field, `must be in [${min}, ${max}], got ${v}`);
  return v;
}

export function requireFinite(field: string, v: unknown, min = -Infinity, code: SchedulingErrorCode = 'invalid_argument'): number {
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new SchedulingError(code, field, `must be a finite number, got ${String(v)}`);
  if (v < min) throw new SchedulingError(code, field, `must be >= ${min}, got ${v}`);
  return v;
}
