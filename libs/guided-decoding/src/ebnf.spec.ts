import { describe, expect, it } from 'vitest';
import { toEbnf } from './ebnf';
import type { GrammarNode } from './grammar';
import { toolCallGrammar } from './tool-call';
import { accepts } from './testing';

/**
 * The EBNF sent to vLLM / SGLang must describe the same language as the automaton the embedded
 * engine walks. Checked by reading the EBNF back with a small interpreter of the form it is
 * written in (right-linear rules: `a ::= [class] b | "literal" c | d | ""`) and comparing
 * acceptance with the automaton's over accepted and rejected texts.
 */
type Alt =
  | { kind: 'empty' }
  | { kind: 'ref'; to: string }
  | { kind: 'class'; ranges: [number, number][]; to: string }
  | { kind: 'lit'; text: number[]; to: string };

function unescape(s: string, i: number): [number, number] {
  if (s[i] !== '\\') return [s.codePointAt(i) as number, i + ((s.codePointAt(i) as number) > 0xffff ? 2 : 1)];
  const n = s[i + 1] === 'U' ? 8 : 4;
  return [parseInt(s.slice(i + 2, i + 2 + n), 16), i + 2 + n];
}

function parseEbnf(text: string): Map<string, Alt[]> {
  const rules = new Map<string, Alt[]>();
  for (const line of text.trim().split('\n')) {
    const [name, body] = line.split(' ::= ');
    const alts: Alt[] = [];
    let i = 0;
    while (i < body.length) {
      if (body.startsWith(' | ', i)) {
        i += 3;
        continue;
      }
      if (body.startsWith('""', i)) {
        alts.push({ kind: 'empty' });
        i += 2;
        continue;
      }
      let head: { kind: 'class'; ranges: [number, number][] } | { kind: 'lit'; text: number[] } | null = null;
      if (body[i] === '[') {
        const ranges: [number, number][] = [];
        i++;
        while (body[i] !== ']') {
          const [lo, j] = unescape(body, i);
          i = j;
          let hi = lo;
          if (body[i] === '-') [hi, i] = unescape(body, i + 1);
          ranges.push([lo, hi]);
        }
        i++;
        head = { kind: 'class', ranges };
      } else if (body[i] === '"') {
        const chars: number[] = [];
        i++;
        while (body[i] !== '"') {
          const [c, j] = unescape(body, i);
          chars.push(c);
          i = j;
        }
        i++;
        head = { kind: 'lit', text: chars };
      }
      if (head) i++; // the space before the target
      const m = /^[a-z]\d+/.exec(body.slice(i)) as RegExpExecArray;
      i += m[0].length;
      alts.push(head ? { ...head, to: m[0] } : { kind: 'ref', to: m[0] });
    }
    rules.set(name, alts);
  }
  return rules;
}

/** Whether the EBNF's `root` derives exactly `text` (a breadth-first walk over (rule, position) pairs). */
function derives(rules: Map<string, Alt[]>, text: string): boolean {
  const cps = [...text].map((c) => c.codePointAt(0) as number);
  let frontier = new Set(['root']);
  const expand = (names: Set<string>) => {
    const out = new Set<string>();
    const stack = [...names];
    while (stack.length) {
      const n = stack.pop() as string;
      if (out.has(n)) continue;
      out.add(n);
      for (const a of rules.get(n) ?? []) if (a.kind === 'ref') stack.push(a.to);
    }
    return out;
  };
  // literal alternatives in flight: [remaining code points, target]
  let pending: [number[], string][] = [];
  for (const c of cps) {
    frontier = expand(frontier);
    const next = new Set<string>();
    const nextPending: [number[], string][] = [];
    for (const [rest, to] of pending) {
      if (rest[0] !== c) continue;
      if (rest.length === 1) next.add(to);
      else nextPending.push([rest.slice(1), to]);
    }
    for (const n of frontier)
      for (const a of rules.get(n) ?? []) {
        if (a.kind === 'class' && a.ranges.some(([lo, hi]) => lo <= c && c <= hi)) next.add(a.to);
        if (a.kind === 'lit' && a.text[0] === c) {
          if (a.text.length === 1) next.add(a.to);
          else nextPending.push([a.text.slice(1), a.to]);
        }
      }
    frontier = next;
    pending = nextPending;
  }
  return [...expand(frontier)].some((n) => (rules.get(n) ?? []).some((a) => a.kind === 'empty'));
}

describe('EBNF export (vLLM structured_outputs.grammar, SGLang ebnf)', () => {
  const cases: [GrammarNode, string[]][] = [
    [
      toolCallGrammar(
        [
          { name: 'add', parameters: { type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 99 } }, required: ['a'] } },
          {
            name: 'say',
            parameters: { type: 'object', properties: { text: { type: 'string', maxLength: 5 }, loud: { type: 'boolean' } } },
          },
        ],
        { afterName: '", "arguments": ', afterArguments: '}\n</tool_call>' },
        null,
      ),
      [
        'add", "arguments": {"a": 42}}\n</tool_call>',
        'add", "arguments": {"a": 100}}\n</tool_call>',
        'say", "arguments": {}}\n</tool_call>',
        'say", "arguments": {"text": "héllo", "loud": true}}\n</tool_call>',
        'say", "arguments": {"text": "toolong"}}\n</tool_call>',
        'say", "arguments": {"loud": true, "text": "x"}}\n</tool_call>',
        'mul", "arguments": {}}\n</tool_call>',
        'add", "arguments": {"a": 4}}\n</tool_call>extra',
      ],
    ],
    [
      { json: { type: 'array', items: { anyOf: [{ type: 'number' }, { const: 'x"y' }] }, maxItems: 2 } },
      ['[]', '[1.5e3, "x\\"y"]', '["x"]', '[1, 2, 3]'],
    ],
    [{ json: { type: 'string' } }, ['"🎉\\u00e9"', '"a', '"\u0001"']],
  ];

  it('describes the same language as the automaton, text for text', () => {
    for (const [grammar, texts] of cases) {
      const rules = parseEbnf(toEbnf(grammar));
      for (const t of texts) expect([t, derives(rules, t)]).toEqual([t, accepts(grammar, t)]);
      expect(texts.some((t) => accepts(grammar, t))).toBe(true);
      expect(texts.some((t) => !accepts(grammar, t))).toBe(true);
    }
  });

  it('writes xgrammar syntax: a root rule, escaped classes and literals, "" where the output may end', () => {
    const ebnf = toEbnf({ seq: [{ text: 'a"\n</tool_call>' }, { json: { type: 'boolean' } }] });
    expect(ebnf.startsWith('root ::= c0\n')).toBe(true);
    expect(ebnf).toMatch(/^s\d+ ::= \[\\u0022\] c\d+$/m);
    expect(ebnf).toMatch(/^s\d+ ::= \[\\u000a\] c\d+$/m);
    expect(ebnf).toMatch(/^c\d+ ::= ""$/m);
    for (const line of ebnf.trim().split('\n')) expect(line).toMatch(/^[a-z]+\d* ::= .+$/);
  });
});
