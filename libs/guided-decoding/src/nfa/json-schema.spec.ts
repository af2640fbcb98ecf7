import { describe, expect, it } from 'vitest';
import { GrammarError } from '../errors';
import { compileGrammar } from '../grammar';
import { accepts } from '../testing';
import type { JsonSchema } from './json-schema';

/** Which of `texts` the schema's automaton accepts, as a compact table for the assertions. */
const accepted = (schema: JsonSchema, texts: string[]) => texts.filter((t) => accepts({ json: schema }, t));
const refusal = (schema: JsonSchema) => {
  try {
    compileGrammar({ json: schema });
  } catch (err) {
    return err as GrammarError;
  }
  throw new Error('compiled');
};

describe('JSON Schema -> automaton: each construct', () => {
  it('strings: any character but quote, backslash and controls; every escape; UTF-8 of any plane', () => {
    const s = { type: 'string' };
    expect(
      accepted(s, ['""', '"abc"', '"é"', '"🎉"', '"a\\"b"', '"\\\\"', '"\\/"', '"\\n\\t\\b\\f\\r"', '"\\u00e9"', '"\\uD83D\\uDE00"']),
    ).toHaveLength(10);
    expect(accepted(s, ['"a', "'a'", 'abc', '"a\nb"', '"\u0001"', '"\\x41"', '"\\u12"', '"\\ud"'])).toEqual([]);
  });

  it('string lengths count characters (an escape is one)', () => {
    const s = { type: 'string', minLength: 2, maxLength: 3 };
    expect(accepted(s, ['"a"', '"ab"', '"é🎉"', '"a\\nb"', '"abc"', '"abcd"', '""'])).toEqual(['"ab"', '"é🎉"', '"a\\nb"', '"abc"']);
    expect(accepted({ type: 'string', minLength: 2 }, ['"a"', '"ab"', '"abcdefgh"'])).toEqual(['"ab"', '"abcdefgh"']);
  });

  it('numbers and integers by the JSON grammar (no leading zeros, no bare dot, no plus)', () => {
    const texts = ['0', '-0', '12', '-12', '1.5', '1e3', '1.5E-3', '2e+10', '01', '1.', '.5', '+1', '-', '1e', '0x1'];
    expect(accepted({ type: 'number' }, texts)).toEqual(['0', '-0', '12', '-12', '1.5', '1e3', '1.5E-3', '2e+10']);
    expect(accepted({ type: 'integer' }, texts)).toEqual(['0', '-0', '12', '-12']);
  });

  it('integer bounds: exactly the integers in range (checked over a span), as zod writes them for int()', () => {
    const check = (schema: Record<string, unknown>, ok: (n: number) => boolean) => {
      for (let n = -250; n <= 250; n++) expect([n, accepts({ json: { type: 'integer', ...schema } }, String(n))]).toEqual([n, ok(n)]);
    };
    check({ minimum: 3, maximum: 117 }, (n) => n >= 3 && n <= 117);
    check({ minimum: -117, maximum: -3 }, (n) => n >= -117 && n <= -3);
    check({ minimum: -20, maximum: 199 }, (n) => n >= -20 && n <= 199);
    check({ exclusiveMinimum: 0 }, (n) => n > 0);
    check({ exclusiveMaximum: 10.5, minimum: -1.5 }, (n) => n >= -1 && n <= 10);
    check({ minimum: 100 }, (n) => n >= 100);
    const safe = { type: 'integer', minimum: -9007199254740991, maximum: 9007199254740991 };
    expect(accepted(safe, ['9007199254740991', '-9007199254740991', '9007199254740992', '12', '99999999999999999'])).toEqual([
      '9007199254740991',
      '-9007199254740991',
      '12',
    ]);
  });

  it('number bounds (whole-number bounds): the fraction is checked against the bound it sits on', () => {
    const check = (schema: Record<string, unknown>, ok: (x: number) => boolean) => {
      for (let k = -400; k <= 400; k++) {
        const x = k / 100;
        for (const text of [x.toFixed(2), String(x)])
          expect([text, accepts({ json: { type: 'number', ...schema } }, text)]).toEqual([text, ok(Number(text))]);
      }
    };
    check({ minimum: 0, maximum: 1 }, (x) => x >= 0 && x <= 1);
    check({ minimum: -2, maximum: 3 }, (x) => x >= -2 && x <= 3);
    check({ exclusiveMinimum: 0 }, (x) => x > 0);
    check({ exclusiveMinimum: -1, exclusiveMaximum: 2 }, (x) => x > -1 && x < 2);
    check({ maximum: -1 }, (x) => x <= -1);
  });

  it('booleans, null, const and enum (values of another type than `type` are left out)', () => {
    expect(accepted({ type: 'boolean' }, ['true', 'false', 'True', '1'])).toEqual(['true', 'false']);
    expect(accepted({ type: 'null' }, ['null', 'None'])).toEqual(['null']);
    expect(accepted({ const: { a: [1, 'x'] } }, ['{"a": [1, "x"]}', '{"a":[1,"x"]}'])).toEqual(['{"a": [1, "x"]}']);
    expect(accepted({ type: 'string', enum: ['c', 'f', 1] }, ['"c"', '"f"', '1', '"k"'])).toEqual(['"c"', '"f"']);
    expect(accepted({ enum: ['x', 2, null] }, ['"x"', '2', 'null', '"2"'])).toEqual(['"x"', '2', 'null']);
  });

  it('objects: declared order, required always, optional may be left out, layout as chat templates render it', () => {
    const s = {
      type: 'object',
      properties: { a: { type: 'integer' }, b: { type: 'string' }, c: { type: 'boolean' } },
      required: ['b'],
    };
    expect(
      accepted(s, [
        '{"b": "x"}',
        '{"a": 1, "b": "x"}',
        '{"b": "x", "c": true}',
        '{"a": 1, "b": "x", "c": false}',
        '{"a": 1}',
        '{}',
        '{"b": "x", "a": 1}',
        '{"a":1, "b": "x"}',
        '{"a": 1, "b": "x", "d": 1}',
        '{"b": "x",}',
      ]),
    ).toEqual(['{"b": "x"}', '{"a": 1, "b": "x"}', '{"b": "x", "c": true}', '{"a": 1, "b": "x", "c": false}']);
    expect(accepted({ type: 'object', properties: { a: { type: 'integer' } } }, ['{}', '{"a": 1}'])).toEqual(['{}', '{"a": 1}']);
  });

  it('additionalProperties: further keys after the declared ones, never a declared key again', () => {
    const s = { type: 'object', properties: { a: { type: 'integer' } }, additionalProperties: { type: 'string' } };
    expect(accepted(s, ['{"a": 1, "x": "y"}', '{"x": "y", "ab": "z"}', '{"": "e"}', '{"a": 1, "a": "y"}', '{"x": 1}'])).toEqual([
      '{"a": 1, "x": "y"}',
      '{"x": "y", "ab": "z"}',
      '{"": "e"}',
    ]);
    expect(accepted({ type: 'object', additionalProperties: true }, ['{"k": [1, {"z": null}]}', '{}'])).toHaveLength(2);
  });

  it('arrays: items, minItems/maxItems, tuples (prefixItems and draft-7 items arrays)', () => {
    const s = { type: 'array', items: { type: 'integer' }, minItems: 1, maxItems: 3 };
    expect(accepted(s, ['[]', '[1]', '[1, 2, 3]', '[1, 2, 3, 4]', '[1,2]', '["a"]'])).toEqual(['[1]', '[1, 2, 3]']);
    expect(accepted({ type: 'array', items: { type: 'integer' } }, ['[]', '[1, 2, 3, 4, 5, 6]'])).toHaveLength(2);
    const tuple = { type: 'array', prefixItems: [{ type: 'string' }, { type: 'integer' }], items: false };
    expect(accepted(tuple, ['["a", 1]', '["a"]', '[]', '["a", 1, 2]', '[1, "a"]'])).toEqual(['["a", 1]', '["a"]', '[]']);
    const draft7 = { type: 'array', items: [{ type: 'string' }], additionalItems: { type: 'boolean' } };
    expect(accepted(draft7, ['["a", true, false]', '[true]'])).toEqual(['["a", true, false]']);
  });

  it('anyOf / oneOf, type lists and nullable', () => {
    const s = { anyOf: [{ type: 'string' }, { type: 'integer', minimum: 0 }] };
    expect(accepted(s, ['"a"', '3', '-3', 'null'])).toEqual(['"a"', '3']);
    expect(accepted({ oneOf: [{ type: 'null' }, { type: 'boolean' }] }, ['null', 'true', '0'])).toEqual(['null', 'true']);
    expect(accepted({ type: ['string', 'null'] }, ['"a"', 'null', '1'])).toEqual(['"a"', 'null']);
    expect(accepted({ type: 'integer', nullable: true }, ['1', 'null', '"1"'])).toEqual(['1', 'null']);
  });

  it('$ref into $defs / definitions, and allOf merged', () => {
    const s = {
      type: 'object',
      properties: { p: { $ref: '#/$defs/point' }, q: { $ref: '#/definitions/tag' } },
      required: ['p', 'q'],
      $defs: { point: { type: 'array', items: { type: 'number' }, maxItems: 2 } },
      definitions: { tag: { enum: ['x', 'y'] } },
    };
    expect(accepted(s, ['{"p": [1, 2.5], "q": "y"}', '{"p": [1, 2, 3], "q": "y"}'])).toEqual(['{"p": [1, 2.5], "q": "y"}']);
    const all = {
      allOf: [
        { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] },
        { properties: { b: { type: 'string' } }, required: ['b'] },
      ],
    };
    expect(accepted(all, ['{"a": 1, "b": "z"}', '{"a": 1}'])).toEqual(['{"a": 1, "b": "z"}']);
  });

  it('any JSON value only where the schema says so (true, {}, annotations only), nested to a bounded depth', () => {
    for (const s of [true, {}, { description: 'anything' }])
      expect(accepted(s, ['1', '"x"', 'null', '[1, {"a": [true]}]', '{"k": {"l": {"m": []}}}'])).toHaveLength(5);
    expect(accepted({}, ['[[[[[[1]]]]]]', '[[[[[1]]]]]'])).toEqual(['[[[[[1]]]]]']);
  });

  it('refuses what it cannot enforce, naming the keyword and where it is', () => {
    const cases: [JsonSchema, RegExp][] = [
      [{ type: 'string', pattern: '^a' }, /#\/json: `pattern` cannot be enforced/],
      [{ type: 'object', properties: { x: { type: 'string', format: 'email', not: {} } } }, /#\/json\/properties\/x: `not`/],
      [{ type: 'array', uniqueItems: true }, /`uniqueItems`/],
      [{ type: 'number', multipleOf: 0.5 }, /`multipleOf`/],
      [{ type: 'number', maximum: 0.5 }, /bound of 0.5/],
      [{ type: 'object', properties: { n: { $ref: '#' } } }, /recursive `\$ref`/],
      [{ type: 'object', required: ['ghost'] }, /"ghost" has no schema/],
      [{ type: 'strin' }, /unknown type "strin"/],
      [false, /accepts no value/],
      [{ type: 'integer', minimum: 5, maximum: 4 }, /no number satisfies/],
      [{ type: 'string', maxLength: 100000 }, /cannot be unrolled/],
    ];
    for (const [schema, message] of cases) {
      const err = refusal(schema);
      expect(err).toBeInstanceOf(GrammarError);
      expect(err.message).toMatch(message);
    }
    expect(refusal({ type: 'string', pattern: 'x' }).kind).toBe('unsupported');
  });

  it('ignores annotations (format, description, $schema, default) rather than refusing them', () => {
    const s = { $schema: 'http://json-schema.org/draft-07/schema#', type: 'string', format: 'date-time', description: 'd', default: 'x' };
    expect(accepted(s, ['"2026-01-01"'])).toEqual(['"2026-01-01"']);
  });
});
