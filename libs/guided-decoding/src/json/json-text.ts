/**
 * JSON text in the layout the automaton emits and chat templates render (`tojson`, Python's
 * `json.dumps` defaults): `{"a": 1, "b": [1, 2]}`, i.e. ", " between items, ": " after keys,
 * no other whitespace. Used for `const` and `enum` values.
 */
export function jsonText(value: unknown): string {
  if (value === null || typeof value === 'boolean' || typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new Error(`${String(value)} is not a JSON number`);
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(jsonText).join(', ')}]`;
  if (typeof value === 'object') {
    return `{${Object.entries(value as Record<string, unknown>)
      .map(([k, v]) => `${JSON.stringify(k)}: ${jsonText(v)}`)
      .join(', ')}}`;
  }
  throw new Error(`${typeof value} is not a JSON value`);
}

/** The JSON type of a value, as JSON Schema's `type` names it (integers are also numbers). */
export function jsonTypeOf(value: unknown): 'null' | 'boolean' | 'integer' | 'number' | 'string' | 'array' | 'object' {
  if (value === null) return 'null';
  if (typeof value === 'boolean') return 'boolean';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  if (typeof value === 'string') return 'string';
  if (Array.isArray(value)) return 'array';
  return 'object';
}
