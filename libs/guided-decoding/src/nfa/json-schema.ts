import { GrammarError } from '../errors';
import { jsonText, jsonTypeOf } from '../json/json-text';
import type { NfaBuilder } from './nfa';
import { anyInteger, anyNumber, boundedIntegers, boundedNumbers } from './numbers';

/** JSON Schema as tools give it (`parameters`): an object, or `true` / `false`. */
export type JsonSchema = boolean | { [key: string]: unknown };

type Schema = Record<string, unknown>;
type TypeName = 'null' | 'boolean' | 'integer' | 'number' | 'string' | 'array' | 'object';
const TYPE_NAMES: readonly TypeName[] = ['null', 'boolean', 'integer', 'number', 'string', 'array', 'object'];

/**
 * How deep a value may nest where the schema allows ANY JSON value (`true`, `{}`, an untyped
 * schema, `additionalProperties: true`, an array without `items`): the automaton is finite, so
 * "any" is unrolled to this many levels of objects/arrays inside it.
 */
export const ANY_VALUE_DEPTH = 5;
/** Largest count the automaton unrolls (maxLength, minItems/maxItems): each is that many copies of a fragment. */
export const MAX_UNROLL = 512;

/** Keywords that validate but that the automaton cannot enforce: a schema using one is refused. */
const UNSUPPORTED = [
  'pattern',
  'patternProperties',
  'propertyNames',
  'dependentRequired',
  'dependentSchemas',
  'dependencies',
  'if',
  'then',
  'else',
  'not',
  'contains',
  'minContains',
  'maxContains',
  'unevaluatedProperties',
  'unevaluatedItems',
  '$dynamicRef',
  '$recursiveRef',
];
const STRING_KEYS = ['minLength', 'maxLength'];
const NUMBER_KEYS = ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf'];
const OBJECT_KEYS = ['properties', 'required', 'additionalProperties', 'minProperties', 'maxProperties'];
const ARRAY_KEYS = ['items', 'prefixItems', 'additionalItems', 'minItems', 'maxItems', 'uniqueItems'];
/** Keywords that say nothing about which values are valid (`format` is an annotation unless a validator opts into asserting it). */
const ANNOTATIONS = new Set([
  'title',
  'description',
  'default',
  'examples',
  'example',
  '$schema',
  '$id',
  '$anchor',
  '$comment',
  '$defs',
  'definitions',
  'deprecated',
  'readOnly',
  'writeOnly',
  'format',
  'contentEncoding',
  'contentMediaType',
  'strict',
]);

/** Characters a JSON string holds literally: anything but '"', '\' and the C0 controls (surrogates are not characters). */
export const STRING_CHARS: readonly number[] = [0x20, 0x21, 0x23, 0x5b, 0x5d, 0xd7ff, 0xe000, 0x10ffff];
const HEX: readonly number[] = [0x30, 0x39, 0x41, 0x46, 0x61, 0x66];
const cp = (c: string) => c.codePointAt(0) as number;

const isSchemaObject = (v: unknown): v is Schema => typeof v === 'object' && v !== null && !Array.isArray(v);
const escapePointer = (k: string) => k.replace(/~/g, '~0').replace(/\//g, '~1');

/**
 * Compiles a JSON Schema (the subset tools use) into NFA fragments. Values are emitted in the
 * layout chat templates render (`{"a": 1, "b": [2, 3]}`); object properties in the order the
 * schema declares them (required ones always, optional ones may be left out), as xgrammar and
 * Outlines do. Without `additionalProperties` an object holds only its declared properties (the
 * strict reading OpenAI's structured outputs use); `additionalProperties: true` or a schema
 * allows further keys (never a declared one) after them. `oneOf` is compiled as `anyOf`
 * (exclusivity is not checked). What cannot be enforced is refused with a GrammarError.
 */
export class JsonSchemaCompiler {
  private readonly refs: string[] = [];

  constructor(
    private readonly b: NfaBuilder,
    private readonly root: JsonSchema,
  ) {}

  /** A value valid against `schema`, from `from`; returns the end state. */
  value(from: number, schema: unknown, path = '#'): number {
    if (schema === true) return this.any(from, ANY_VALUE_DEPTH);
    if (schema === false) throw new GrammarError('invalid', path, 'the schema `false` accepts no value');
    if (!isSchemaObject(schema)) throw new GrammarError('invalid', path, 'a schema must be an object or a boolean');
    for (const k of UNSUPPORTED)
      if (k in schema) throw new GrammarError('unsupported', path, `\`${k}\` cannot be enforced by constrained decoding`);
    if (typeof schema.$ref === 'string') return this.ref(from, schema, path);
    if (Array.isArray(schema.allOf)) return this.value(from, this.mergeAll(schema, path), path);
    for (const key of ['anyOf', 'oneOf'] as const) {
      const list = schema[key];
      if (list === undefined) continue;
      if (!Array.isArray(list) || list.length === 0) throw new GrammarError('invalid', path, `\`${key}\` must be a non-empty array`);
      const rest = { ...schema };
      delete rest[key];
      return this.b.alt(
        from,
        list.map((alt, i) => (s: number) => this.value(s, merge(rest, alt, `${path}/${key}/${i}`), `${path}/${key}/${i}`)),
      );
    }
    const types = typesOf(schema, path);
    if ('const' in schema) return this.literals(from, [schema.const], types, path);
    if ('enum' in schema) {
      if (!Array.isArray(schema.enum) || schema.enum.length === 0)
        throw new GrammarError('invalid', path, '`enum` must be a non-empty array');
      return this.literals(from, schema.enum, types, path);
    }
    if (types === null) return this.any(from, ANY_VALUE_DEPTH);
    if (types.length === 1) return this.typed(from, types[0], schema, path);
    return this.b.alt(
      from,
      types.map((t) => (s: number) => this.typed(s, t, schema, path)),
    );
  }

  private ref(from: number, schema: Schema, path: string): number {
    const ref = schema.$ref as string;
    if (this.refs.includes(ref))
      throw new GrammarError('unsupported', path, `recursive \`$ref\` ${ref} cannot be unrolled into an automaton`);
    if (!ref.startsWith('#')) throw new GrammarError('unsupported', path, `only local \`$ref\`s (#/...) are supported, not ${ref}`);
    let target: unknown = this.root;
    for (const raw of ref
      .slice(1)
      .split('/')
      .filter((p) => p.length > 0)) {
      const key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
      target = isSchemaObject(target) || Array.isArray(target) ? (target as Record<string, unknown>)[key] : undefined;
      if (target === undefined) throw new GrammarError('invalid', path, `\`$ref\` ${ref} points at nothing`);
    }
    const rest = { ...schema };
    delete rest.$ref;
    this.refs.push(ref);
    try {
      return this.value(from, merge(rest, target, path), path);
    } finally {
      this.refs.pop();
    }
  }

  private mergeAll(schema: Schema, path: string): unknown {
    const rest = { ...schema };
    delete rest.allOf;
    return (schema.allOf as unknown[]).reduce<unknown>(
      (acc, s, i) => merge(acc, this.deref(s, `${path}/allOf/${i}`), `${path}/allOf/${i}`),
      rest,
    );
  }

  /** An allOf member with its local `$ref` resolved (so its keywords can be merged). */
  private deref(s: unknown, path: string): unknown {
    if (!isSchemaObject(s) || typeof s.$ref !== 'string') return s;
    let target: unknown = this.root;
    for (const raw of s.$ref
      .slice(1)
      .split('/')
      .filter((p) => p.length > 0))
      target = isSchemaObject(target) ? target[decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~')] : undefined;
    if (target === undefined) throw new GrammarError('invalid', path, `\`$ref\` ${s.$ref} points at nothing`);
    const rest = { ...s };
    delete rest.$ref;
    return merge(rest, target, path);
  }

  /** One of the given values, written out; values of a type the schema excludes are skipped. */
  private literals(from: number, values: unknown[], types: TypeName[] | null, path: string): number {
    const ok = values.filter((v) => {
      const t = jsonTypeOf(v);
      return types === null || types.includes(t) || (t === 'integer' && types.includes('number'));
    });
    if (ok.length === 0) throw new GrammarError('invalid', path, "no `enum`/`const` value has the schema's `type`");
    const texts = [...new Set(ok.map((v) => jsonText(v)))];
    return texts.length === 1
      ? this.b.text(from, texts[0])
      : this.b.alt(
          from,
          texts.map((t) => (s: number) => this.b.text(s, t)),
        );
  }

  private typed(from: number, type: TypeName, s: Schema, path: string): number {
    const b = this.b;
    switch (type) {
      case 'null':
        return b.text(from, 'null');
      case 'boolean':
        return b.alt(from, [(t) => b.text(t, 'true'), (t) => b.text(t, 'false')]);
      case 'string':
        return this.string(from, count(s, 'minLength', path) ?? 0, count(s, 'maxLength', path));
      case 'integer':
      case 'number':
        return this.number(from, type, s, path);
      case 'object':
        return this.object(from, s, path);
      case 'array':
        return this.array(from, s, path);
    }
  }

  /** One JSON string character: literal, or an escape (`\"`, `\n`, `\u00e9`, ...). */
  private stringChar(from: number): number {
    const b = this.b;
    const end = b.state();
    b.ranges2(from, STRING_CHARS, end);
    const esc = b.char(from, 0x5c);
    for (const c of '"\\/bfnrt') b.range(esc, cp(c), cp(c), end);
    let h = b.char(esc, cp('u'));
    for (let i = 0; i < 3; i++) {
      const next = b.state();
      b.ranges2(h, HEX, next);
      h = next;
    }
    b.ranges2(h, HEX, end);
    return end;
  }

  /** `"..."` with between min and max characters (an escape counts as one; max null = no limit). */
  string(from: number, min: number, max: number | null): number {
    const b = this.b;
    if (max !== null && max < min) throw new GrammarError('invalid', '#', `maxLength ${max} < minLength ${min}`);
    if ((max ?? min) > MAX_UNROLL) throw new GrammarError('too-large', '#', `string lengths above ${MAX_UNROLL} cannot be unrolled`);
    const end = b.state();
    let p = b.char(from, 0x22);
    const last = max ?? min;
    for (let i = 0; i <= last; i++) {
      if (i >= min && (max !== null || i === last)) {
        if (max === null) p = b.star(p, (t) => this.stringChar(t));
        b.range(p, 0x22, 0x22, end);
      }
      if (i < last) p = this.stringChar(p);
    }
    return end;
  }

  private number(from: number, type: 'integer' | 'number', s: Schema, path: string): number {
    const mult = s.multipleOf;
    if (mult !== undefined && !(type === 'integer' && mult === 1))
      throw new GrammarError('unsupported', path, '`multipleOf` cannot be enforced by constrained decoding');
    const bounds = numberBounds(s, type, path);
    if (bounds === null) return type === 'integer' ? anyInteger(this.b, from) : anyNumber(this.b, from);
    const end = type === 'integer' ? boundedIntegers(this.b, from, bounds.lo, bounds.hi) : boundedNumbers(this.b, from, bounds);
    if (end === null) throw new GrammarError('invalid', path, 'no number satisfies these bounds');
    return end;
  }

  private object(from: number, s: Schema, path: string): number {
    const b = this.b;
    const props = s.properties ?? {};
    if (!isSchemaObject(props)) throw new GrammarError('invalid', path, '`properties` must be an object');
    const names = Object.keys(props);
    const required = s.required ?? [];
    if (!Array.isArray(required) || required.some((r) => typeof r !== 'string'))
      throw new GrammarError('invalid', path, '`required` must be an array of strings');
    for (const r of required as string[])
      if (!names.includes(r))
        throw new GrammarError('unsupported', path, `required property ${JSON.stringify(r)} has no schema under \`properties\``);
    const extra = s.additionalProperties ?? false;
    const minP = count(s, 'minProperties', path);
    const maxP = count(s, 'maxProperties', path);
    if (minP !== null && minP > required.length)
      throw new GrammarError('unsupported', path, '`minProperties` above the number of required properties cannot be enforced');
    if (maxP !== null && (maxP < names.length || extra !== false))
      throw new GrammarError('unsupported', path, '`maxProperties` below the number of allowed properties cannot be enforced');
    // A: nothing written yet (no comma before the next entry); B: something written.
    let A: number | null = b.char(from, 0x7b);
    let B: number | null = null;
    names.forEach((name) => {
      const entry = b.state();
      if (A !== null) b.epsilon(A, entry);
      if (B !== null) b.epsilon(b.text(B, ', '), entry);
      const valueEnd = this.value(b.text(entry, `${JSON.stringify(name)}: `), props[name], `${path}/properties/${escapePointer(name)}`);
      if ((required as string[]).includes(name)) {
        A = null;
        B = valueEnd;
      } else {
        const nb = b.state();
        b.epsilon(valueEnd, nb);
        if (B !== null) b.epsilon(B, nb);
        B = nb;
      }
    });
    if (extra !== false) {
      const loop = b.state();
      if (B !== null) b.epsilon(B, loop);
      const entry = b.state();
      if (A !== null) b.epsilon(A, entry);
      b.epsilon(b.text(loop, ', '), entry);
      const key = this.keyExcluding(
        entry,
        names.map((n) => JSON.stringify(n).slice(1, -1)),
      );
      b.epsilon(this.value(b.text(key, ': '), extra, `${path}/additionalProperties`), loop);
      B = loop;
    }
    const end = b.state();
    if (A !== null) b.epsilon(b.char(A, 0x7d), end);
    if (B !== null) b.epsilon(b.char(B, 0x7d), end);
    return end;
  }

  /** A key string that is none of `names` (their JSON-escaped text), without escapes: a trie over the names, and a free state once it left them. */
  private keyExcluding(from: number, names: string[]): number {
    const b = this.b;
    const end = b.state();
    const free = b.state();
    b.ranges2(free, STRING_CHARS, free);
    b.range(free, 0x22, 0x22, end);
    const root = b.char(from, 0x22);
    const build = (node: number, prefix: string) => {
      const here = names.filter((n) => n.startsWith(prefix));
      const next = [...new Set(here.filter((n) => n.length > prefix.length).map((n) => n.codePointAt(prefix.length) as number))].sort(
        (x, y) => x - y,
      );
      for (const c of next) {
        const child = b.state();
        b.range(node, c, c, child);
        build(child, prefix + String.fromCodePoint(c));
      }
      b.ranges2(node, subtract(STRING_CHARS, next), free);
      if (!names.includes(prefix)) b.range(node, 0x22, 0x22, end);
    };
    build(root, '');
    return end;
  }

  private array(from: number, s: Schema, path: string): number {
    const b = this.b;
    if (s.uniqueItems === true) throw new GrammarError('unsupported', path, '`uniqueItems` cannot be enforced by constrained decoding');
    const tuple = Array.isArray(s.prefixItems) ? s.prefixItems : Array.isArray(s.items) ? s.items : [];
    const rest: unknown = Array.isArray(s.items)
      ? (s.additionalItems ?? true)
      : Array.isArray(s.prefixItems)
        ? (s.items ?? true)
        : (s.items ?? true);
    const min = count(s, 'minItems', path) ?? 0;
    let max = count(s, 'maxItems', path);
    if (rest === false) max = max === null ? tuple.length : Math.min(max, tuple.length);
    if (max !== null && max < min) throw new GrammarError('invalid', path, `no array has between ${min} and ${max} items`);
    const unrolled = max ?? Math.max(min, tuple.length, 1);
    if (unrolled > MAX_UNROLL) throw new GrammarError('too-large', path, `arrays of more than ${MAX_UNROLL} items cannot be unrolled`);
    const itemSchema = (i: number) => (i < tuple.length ? tuple[i] : rest);
    const itemPath = (i: number) => (i < tuple.length ? `${path}/prefixItems/${i}` : `${path}/items`);
    const end = b.state();
    let p = b.char(from, 0x5b);
    for (let i = 0; i <= unrolled; i++) {
      if (i >= min) b.epsilon(b.char(p, 0x5d), end);
      if (i < unrolled) p = this.value(i > 0 ? b.text(p, ', ') : p, itemSchema(i), itemPath(i));
    }
    if (max === null) {
      const loop = b.state();
      b.epsilon(p, loop);
      b.epsilon(this.value(b.text(loop, ', '), rest, `${path}/items`), loop);
      b.epsilon(b.char(loop, 0x5d), end);
    }
    return end;
  }

  /** Any JSON value, objects and arrays nested at most `depth` deep. */
  any(from: number, depth: number): number {
    const b = this.b;
    const options: ((s: number) => number)[] = [
      (s) => this.string(s, 0, null),
      (s) => anyNumber(b, s),
      (s) => b.text(s, 'true'),
      (s) => b.text(s, 'false'),
      (s) => b.text(s, 'null'),
    ];
    if (depth > 0) {
      options.push((s) => this.container(s, 0x7b, 0x7d, (t) => this.any(b.text(this.string(t, 0, null), ': '), depth - 1)));
      options.push((s) => this.container(s, 0x5b, 0x5d, (t) => this.any(t, depth - 1)));
    }
    return b.alt(from, options);
  }

  /** `open (entry (", " entry)*)? close` with one copy of the entry. */
  private container(from: number, open: number, close: number, entry: (s: number) => number): number {
    const b = this.b;
    const start = b.char(from, open);
    const end = b.state();
    b.epsilon(b.char(start, close), end);
    const entryStart = b.state();
    b.epsilon(start, entryStart);
    const after = entry(entryStart);
    b.epsilon(b.text(after, ', '), entryStart);
    b.epsilon(b.char(after, close), end);
    return end;
  }
}

/** The schema's types; null when it does not restrict the type (nor implies one by its keywords). */
function typesOf(s: Schema, path: string): TypeName[] | null {
  let types: TypeName[] | null = null;
  if (s.type !== undefined) {
    const list = Array.isArray(s.type) ? s.type : [s.type];
    for (const t of list)
      if (!TYPE_NAMES.includes(t as TypeName)) throw new GrammarError('invalid', path, `unknown type ${JSON.stringify(t)}`);
    if (list.length === 0) throw new GrammarError('invalid', path, '`type` must name at least one type');
    types = [...new Set(list as TypeName[])];
    // integer is a subset of number: listing both is number
    if (types.includes('number')) types = types.filter((t) => t !== 'integer');
  } else {
    const implied = new Set<TypeName>();
    const has = (keys: string[]) => keys.some((k) => k in s);
    if (has(OBJECT_KEYS)) implied.add('object');
    if (has(ARRAY_KEYS)) implied.add('array');
    if (has(STRING_KEYS)) implied.add('string');
    if (has(NUMBER_KEYS)) implied.add('number');
    if (implied.size > 0) types = [...implied];
  }
  if (types !== null && s.nullable === true && !types.includes('null')) types.push('null');
  return types;
}

/** A non-negative integer keyword, or null when absent. */
function count(s: Schema, key: string, path: string): number | null {
  const v = s[key];
  if (v === undefined) return null;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0)
    throw new GrammarError('invalid', path, `\`${key}\` must be a non-negative integer`);
  return v;
}

interface Bounds {
  lo: bigint | null;
  loExclusive: boolean;
  hi: bigint | null;
  hiExclusive: boolean;
}

/**
 * minimum / maximum / exclusiveMinimum / exclusiveMaximum (numbers, or draft-4 booleans) as
 * bigint bounds; integers round them inward, numbers need integer bounds (refused otherwise).
 */
function numberBounds(s: Schema, type: 'integer' | 'number', path: string): Bounds | null {
  const num = (k: string): number | null => {
    const v = s[k];
    if (v === undefined || typeof v === 'boolean') return null;
    if (typeof v !== 'number' || !Number.isFinite(v)) throw new GrammarError('invalid', path, `\`${k}\` must be a number`);
    return v;
  };
  const min = num('minimum');
  const max = num('maximum');
  const exMin = s.exclusiveMinimum === true ? min : num('exclusiveMinimum');
  const exMax = s.exclusiveMaximum === true ? max : num('exclusiveMaximum');
  const incMin = s.exclusiveMinimum === true ? null : min;
  const incMax = s.exclusiveMaximum === true ? null : max;
  if (incMin === null && incMax === null && exMin === null && exMax === null) return null;
  if (type === 'integer') {
    const los = [incMin === null ? null : Math.ceil(incMin), exMin === null ? null : Math.floor(exMin) + 1].filter(
      (x): x is number => x !== null,
    );
    const his = [incMax === null ? null : Math.floor(incMax), exMax === null ? null : Math.ceil(exMax) - 1].filter(
      (x): x is number => x !== null,
    );
    return {
      lo: los.length ? BigInt(Math.max(...los)) : null,
      loExclusive: false,
      hi: his.length ? BigInt(Math.min(...his)) : null,
      hiExclusive: false,
    };
  }
  for (const v of [incMin, incMax, exMin, exMax])
    if (v !== null && !Number.isInteger(v))
      throw new GrammarError('unsupported', path, `a \`number\` bound of ${v} cannot be enforced (only whole-number bounds can)`);
  const pick = (inc: number | null, ex: number | null, lower: boolean): [bigint | null, boolean] => {
    if (inc === null && ex === null) return [null, false];
    if (inc === null) return [BigInt(ex as number), true];
    if (ex === null) return [BigInt(inc), false];
    const exTighter = lower ? ex >= inc : ex <= inc;
    return exTighter ? [BigInt(ex), true] : [BigInt(inc), false];
  };
  const [lo, loExclusive] = pick(incMin, exMin, true);
  const [hi, hiExclusive] = pick(incMax, exMax, false);
  return { lo, loExclusive, hi, hiExclusive };
}

/**
 * `a` and `b` as one schema (allOf, a `$ref` with siblings, anyOf alternatives with the keywords
 * next to them): properties merged, required united, anything else must agree.
 */
function merge(a: unknown, b: unknown, path: string): unknown {
  if (b === true) return a;
  if (!isSchemaObject(a) || !isSchemaObject(b)) {
    if (a === false || b === false) return false;
    throw new GrammarError('invalid', path, 'a schema must be an object or a boolean');
  }
  const out: Schema = { ...a };
  for (const [k, v] of Object.entries(b)) {
    if (!(k in out) || ANNOTATIONS.has(k)) out[k] = v;
    else if (k === 'properties' && isSchemaObject(out[k]) && isSchemaObject(v)) {
      const props: Schema = { ...(out[k] as Schema) };
      for (const [name, ps] of Object.entries(v)) props[name] = name in props ? merge(props[name], ps, `${path}/properties/${name}`) : ps;
      out[k] = props;
    } else if (k === 'required' && Array.isArray(out[k]) && Array.isArray(v)) out[k] = [...new Set([...(out[k] as unknown[]), ...v])];
    else if (JSON.stringify(out[k]) !== JSON.stringify(v))
      throw new GrammarError(
        'unsupported',
        path,
        `\`${k}\` is given twice with different values (allOf/$ref/anyOf siblings cannot be merged)`,
      );
  }
  return out;
}

/** Flat [lo, hi] ranges minus single code points (sorted). */
function subtract(ranges: readonly number[], points: readonly number[]): number[] {
  const out: number[] = [];
  for (let i = 0; i < ranges.length; i += 2) {
    let lo = ranges[i];
    const hi = ranges[i + 1];
    for (const p of points) {
      if (p < lo || p > hi) continue;
      if (p > lo) out.push(lo, p - 1);
      lo = p + 1;
    }
    if (lo <= hi) out.push(lo, hi);
  }
  return out;
}
