#!/usr/bin/env node
// Writes tasks.jsonl: the SmolLM2 demo's number tasks (which of two numbers is larger or smaller,
// and single-digit sums), a train split and a held-out eval split with no problem in both, from a
// fixed seed so the file is the same on every machine. Scored by the built-in `number` verifier
// (the first number of the answer equals data.answer).
//   node examples/smollm2/make-tasks.mjs [--train 1500] [--eval 200] [--seed 1]
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: { train: { type: 'string', default: '1500' }, eval: { type: 'string', default: '200' }, seed: { type: 'string', default: '1' } },
});
let state = Number(values.seed) >>> 0 || 1;
// xorshift32: enough for shuffling problems, and the same everywhere.
const rand = () => {
  state ^= state << 13;
  state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5;
  state >>>= 0;
  return state / 2 ** 32;
};
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

const SUFFIX = 'Answer with just the number.';
function problem() {
  const kind = ['larger', 'smaller', 'sum'][int(0, 2)];
  if (kind === 'sum') {
    const a = int(0, 9);
    const b = int(0, 9);
    return { key: `sum ${a} ${b}`, kind, prompt: `What is ${a} + ${b}? ${SUFFIX}`, answer: a + b };
  }
  const a = int(10, 99);
  let b = int(10, 99);
  if (b === a) b = a === 99 ? 10 : a + 1;
  const answer = kind === 'larger' ? Math.max(a, b) : Math.min(a, b);
  return { key: `${kind} ${a} ${b}`, kind, prompt: `Which number is ${kind}, ${a} or ${b}? ${SUFFIX}`, answer };
}

const seen = new Set();
const lines = [];
for (const [split, count] of [
  ['eval', Number(values.eval)],
  ['train', Number(values.train)],
]) {
  for (let i = 0; i < count;) {
    const p = problem();
    if (seen.has(p.key)) continue;
    seen.add(p.key);
    lines.push(
      JSON.stringify({ id: `${split}-${String(i).padStart(4, '0')}`, prompt: p.prompt, split, data: { answer: p.answer, kind: p.kind } }),
    );
    i++;
  }
}
const out = join(dirname(fileURLToPath(import.meta.url)), 'tasks.jsonl');
writeFileSync(out, `${lines.join('\n')}\n`);
console.log(`wrote ${lines.length} tasks to ${out}`);
