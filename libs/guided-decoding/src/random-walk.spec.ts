import { describe, expect, it } from 'vitest';
import Ajv2020 from 'ajv/dist/2020';
import { ByteTokenizer, parseAssistantOutput, type ToolDefinition } from '@anvil/tokenizer';
import { ConstraintCompiler } from './compiler';
import { toolCallGrammar, type ToolSpec } from './tool-call';
import { bpeLikeVocabulary, randomWalk, rng } from './testing';
import type { TokenSource } from './automaton/vocabulary';

/**
 * The property constrained decoding promises: whatever the model samples among the allowed
 * tokens, the output is a tool call that parses (with the gateway's own Hermes parser) and whose
 * arguments validate against the tool's schema (checked by Ajv, an independent validator), and
 * it ends with a stop id within max tokens. The "model" here samples uniformly among allowed
 * ids, which never prefers to close a string or an array: only the budget-aware masks end it.
 */
const tools: ToolSpec[] = [
  {
    name: 'add',
    parameters: {
      $schema: 'http://json-schema.org/draft-07/schema#',
      type: 'object',
      properties: {
        a: { type: 'integer', minimum: -9007199254740991, maximum: 9007199254740991 },
        b: { type: 'integer', minimum: -9007199254740991, maximum: 9007199254740991 },
      },
      required: ['a', 'b'],
      additionalProperties: false,
    },
  },
  {
    name: 'book_trip',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', maxLength: 12 },
        unit: { enum: ['celsius', 'fahrenheit'] },
        nights: { type: 'integer', minimum: 1, maximum: 30 },
        budget: { type: 'number', minimum: 0, maximum: 5000 },
        guests: {
          type: 'array',
          items: { type: 'object', properties: { name: { type: 'string' }, age: { type: ['integer', 'null'] } } },
          maxItems: 3,
        },
        refundable: { type: 'boolean' },
        note: { anyOf: [{ type: 'string', maxLength: 8 }, { type: 'null' }] },
      },
      required: ['city', 'nights'],
    },
  },
  {
    name: 'annotate',
    parameters: {
      type: 'object',
      properties: {
        id: { $ref: '#/$defs/id' },
        span: { type: 'array', prefixItems: [{ type: 'integer' }, { type: 'integer' }], items: false },
      },
      required: ['id'],
      additionalProperties: true,
      $defs: { id: { type: 'string', minLength: 1, maxLength: 4 } },
    },
  },
  { name: 'ping' },
];
const frame = { afterName: '", "arguments": ', afterArguments: '}\n</tool_call>' };
const OPENING = '<tool_call>\n{"name": "';
const definitions: ToolDefinition[] = tools.map((t) => ({
  type: 'function',
  function: { name: t.name, ...(t.parameters ? { parameters: t.parameters as Record<string, unknown> } : {}) },
}));
const ajv = new Ajv2020({ strict: false });
// validated as 2020-12 (prefixItems); the draft-07 `$schema` zod writes is left out of Ajv's view
const schemaOf = (t: ToolSpec) => {
  const { $schema: _, ...rest } = (t.parameters ?? { type: 'object', additionalProperties: false }) as Record<string, unknown>;
  return rest;
};
const validators = new Map(tools.map((t) => [t.name, ajv.compile(schemaOf(t))]));

function check(source: TokenSource & { decode(ids: readonly number[]): string }, stopIds: number[], runs: number, seed: number) {
  const compiler = new ConstraintCompiler(source);
  const random = rng(seed);
  const called = new Set<string>();
  let forced = 0;
  let total = 0;
  for (let run = 0; run < runs; run++) {
    const named = run % 3 === 0 ? tools[run % tools.length].name : null;
    const grammar = toolCallGrammar(tools, frame, named);
    const maxTokens = 60 + Math.floor(random() * 140);
    const walk = randomWalk(compiler.constraint(grammar, stopIds), stopIds, maxTokens, random);
    expect(walk.stopped).toBe(true);
    const text = OPENING + (named ?? '') + source.decode(walk.ids.slice(0, -1));
    const parsed = parseAssistantOutput(text, { format: 'hermes', tools: definitions });
    expect({ text, issues: parsed.issues }).toEqual({ text, issues: [] });
    expect(parsed.toolCalls).toHaveLength(1);
    const call = parsed.toolCalls[0];
    if (named) expect(call.name).toBe(named);
    const validate = validators.get(call.name);
    const args: unknown = JSON.parse(call.arguments);
    expect({ text, valid: validate?.(args), errors: validate?.errors ?? null }).toEqual({ text, valid: true, errors: null });
    called.add(call.name);
    forced += walk.counts.filter((c) => c === 1).length;
    total += walk.counts.length;
  }
  // "required" picks among every tool, and literal parts of the frame are forced tokens
  expect(called).toEqual(new Set(tools.map((t) => t.name)));
  expect(forced).toBeGreaterThan(0);
  expect(forced).toBeLessThan(total);
}

describe('random walks through forced tool calls: every output parses and validates', () => {
  it('over a BPE-like vocabulary (multi-character pieces, pieces that split UTF-8 characters, added tokens)', () => {
    const v = bpeLikeVocabulary();
    check(v, [v.ids.get('<|im_end|>') as number], 300, 7);
  });

  it("over the tiny model's byte tokenizer (one token per byte)", () => {
    const tok = new ByteTokenizer();
    check(tok, [258, 256], 300, 11);
  });
});
