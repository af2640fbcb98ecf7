/**
 * The functions the built-in repo-fix set is made of: each written once in Python and once in
 * JavaScript, its test cases (arguments and the expected result, as JSON), and the bugs that can
 * be seeded into it. A bug is a list of exact replacements in the correct source (so the fix is
 * the reverse edit), and `example` is a case it makes fail (the problem statement quotes it).
 * The catalog's spec checks every bug of both languages against the cases: it fails at least its
 * example, and the correct source passes them all.
 */
export interface Bug {
  id: string;
  python: [find: string, replace: string][];
  javascript: [find: string, replace: string][];
  /** Index into `cases` of a case the bug breaks in both languages. */
  example: number;
}

export interface CatalogFunction {
  id: string;
  /** The function's name in each language (snake_case, camelCase). */
  names: { python: string; javascript: string };
  python: string;
  javascript: string;
  cases: { args: unknown[]; expect: unknown }[];
  bugs: Bug[];
}

const py = (lines: string[]) => `${lines.join('\n')}\n`;
const js = py;

export const CATALOG: CatalogFunction[] = [
  {
    id: 'add_all',
    names: { python: 'add_all', javascript: 'addAll' },
    python: py(['def add_all(xs):', '    total = 0', '    for x in xs:', '        total += x', '    return total']),
    javascript: js([
      'function addAll(xs) {',
      '  let total = 0;',
      '  for (const x of xs) {',
      '    total += x;',
      '  }',
      '  return total;',
      '}',
    ]),
    cases: [
      { args: [[1, 2, 3]], expect: 6 },
      { args: [[]], expect: 0 },
      { args: [[5]], expect: 5 },
      { args: [[-2, 2, 10]], expect: 10 },
    ],
    bugs: [
      { id: 'starts-at-one', python: [['total = 0', 'total = 1']], javascript: [['let total = 0;', 'let total = 1;']], example: 0 },
      {
        id: 'skips-first',
        python: [['for x in xs:', 'for x in xs[1:]:']],
        javascript: [['for (const x of xs) {', 'for (const x of xs.slice(1)) {']],
        example: 0,
      },
    ],
  },
  {
    id: 'largest',
    names: { python: 'largest', javascript: 'largest' },
    python: py([
      'def largest(xs):',
      '    best = xs[0]',
      '    for x in xs[1:]:',
      '        if x > best:',
      '            best = x',
      '    return best',
    ]),
    javascript: js([
      'function largest(xs) {',
      '  let best = xs[0];',
      '  for (const x of xs.slice(1)) {',
      '    if (x > best) {',
      '      best = x;',
      '    }',
      '  }',
      '  return best;',
      '}',
    ]),
    cases: [
      { args: [[3, 9, 2]], expect: 9 },
      { args: [[-5, -2, -9]], expect: -2 },
      { args: [[7]], expect: 7 },
      { args: [[1, 1, 0]], expect: 1 },
    ],
    bugs: [
      {
        id: 'wrong-comparison',
        python: [['if x > best:', 'if x < best:']],
        javascript: [['if (x > best) {', 'if (x < best) {']],
        example: 0,
      },
      {
        id: 'starts-at-zero',
        python: [
          ['best = xs[0]', 'best = 0'],
          ['for x in xs[1:]:', 'for x in xs:'],
        ],
        javascript: [
          ['let best = xs[0];', 'let best = 0;'],
          ['for (const x of xs.slice(1)) {', 'for (const x of xs) {'],
        ],
        example: 1,
      },
    ],
  },
  {
    id: 'clamp',
    names: { python: 'clamp', javascript: 'clamp' },
    python: py(['def clamp(x, lo, hi):', '    if x < lo:', '        return lo', '    if x > hi:', '        return hi', '    return x']),
    javascript: js([
      'function clamp(x, lo, hi) {',
      '  if (x < lo) {',
      '    return lo;',
      '  }',
      '  if (x > hi) {',
      '    return hi;',
      '  }',
      '  return x;',
      '}',
    ]),
    cases: [
      { args: [5, 0, 10], expect: 5 },
      { args: [-3, 0, 10], expect: 0 },
      { args: [12, 0, 10], expect: 10 },
      { args: [10, 0, 10], expect: 10 },
      { args: [0, 0, 10], expect: 0 },
    ],
    bugs: [
      { id: 'low-returns-x', python: [['return lo', 'return x']], javascript: [['return lo;', 'return x;']], example: 1 },
      { id: 'high-off-by-one', python: [['return hi', 'return hi - 1']], javascript: [['return hi;', 'return hi - 1;']], example: 2 },
    ],
  },
  {
    id: 'is_palindrome',
    names: { python: 'is_palindrome', javascript: 'isPalindrome' },
    python: py(['def is_palindrome(s):', '    t = s.lower()', '    return t == t[::-1]']),
    javascript: js(['function isPalindrome(s) {', '  const t = s.toLowerCase();', "  return t === [...t].reverse().join('');", '}']),
    cases: [
      { args: ['Level'], expect: true },
      { args: ['abc'], expect: false },
      { args: [''], expect: true },
      { args: ['Aa'], expect: true },
      { args: ['ab'], expect: false },
    ],
    bugs: [
      {
        id: 'case-sensitive',
        python: [['t = s.lower()', 't = s']],
        javascript: [['const t = s.toLowerCase();', 'const t = s;']],
        example: 0,
      },
      {
        id: 'drops-a-letter',
        python: [['t[::-1]', 't[-2::-1]']],
        javascript: [["[...t].reverse().join('')", "[...t].slice(1).reverse().join('')"]],
        example: 0,
      },
    ],
  },
  {
    id: 'count_vowels',
    names: { python: 'count_vowels', javascript: 'countVowels' },
    python: py([
      'def count_vowels(s):',
      '    count = 0',
      '    for ch in s.lower():',
      '        if ch in "aeiou":',
      '            count += 1',
      '    return count',
    ]),
    javascript: js([
      'function countVowels(s) {',
      '  let count = 0;',
      '  for (const ch of s.toLowerCase()) {',
      "    if ('aeiou'.includes(ch)) {",
      '      count += 1;',
      '    }',
      '  }',
      '  return count;',
      '}',
    ]),
    cases: [
      { args: ['hello'], expect: 2 },
      { args: ['AEIOU'], expect: 5 },
      { args: ['rhythm'], expect: 0 },
      { args: ['unusual'], expect: 4 },
    ],
    bugs: [
      { id: 'misses-u', python: [['"aeiou"', '"aeio"']], javascript: [["'aeiou'", "'aeio'"]], example: 3 },
      { id: 'case-sensitive', python: [['s.lower()', 's']], javascript: [['s.toLowerCase()', 's']], example: 1 },
    ],
  },
  {
    id: 'factorial',
    names: { python: 'factorial', javascript: 'factorial' },
    python: py(['def factorial(n):', '    result = 1', '    for i in range(2, n + 1):', '        result *= i', '    return result']),
    javascript: js([
      'function factorial(n) {',
      '  let result = 1;',
      '  for (let i = 2; i <= n; i++) {',
      '    result *= i;',
      '  }',
      '  return result;',
      '}',
    ]),
    cases: [
      { args: [0], expect: 1 },
      { args: [1], expect: 1 },
      { args: [5], expect: 120 },
      { args: [3], expect: 6 },
    ],
    bugs: [
      { id: 'off-by-one', python: [['range(2, n + 1)', 'range(2, n)']], javascript: [['i <= n', 'i < n']], example: 2 },
      { id: 'starts-at-zero', python: [['result = 1', 'result = 0']], javascript: [['let result = 1;', 'let result = 0;']], example: 0 },
    ],
  },
  {
    id: 'gcd',
    names: { python: 'gcd', javascript: 'gcd' },
    python: py(['def gcd(a, b):', '    while b != 0:', '        a, b = b, a % b', '    return a']),
    javascript: js(['function gcd(a, b) {', '  while (b !== 0) {', '    [a, b] = [b, a % b];', '  }', '  return a;', '}']),
    cases: [
      { args: [12, 18], expect: 6 },
      { args: [7, 3], expect: 1 },
      { args: [5, 0], expect: 5 },
      { args: [0, 4], expect: 4 },
    ],
    bugs: [{ id: 'returns-b', python: [['return a', 'return b']], javascript: [['return a;', 'return b;']], example: 0 }],
  },
  {
    id: 'fizzbuzz',
    names: { python: 'fizzbuzz', javascript: 'fizzbuzz' },
    python: py([
      'def fizzbuzz(n):',
      '    if n % 15 == 0:',
      '        return "FizzBuzz"',
      '    if n % 3 == 0:',
      '        return "Fizz"',
      '    if n % 5 == 0:',
      '        return "Buzz"',
      '    return str(n)',
    ]),
    javascript: js([
      'function fizzbuzz(n) {',
      '  if (n % 15 === 0) {',
      "    return 'FizzBuzz';",
      '  }',
      '  if (n % 3 === 0) {',
      "    return 'Fizz';",
      '  }',
      '  if (n % 5 === 0) {',
      "    return 'Buzz';",
      '  }',
      '  return String(n);',
      '}',
    ]),
    cases: [
      { args: [3], expect: 'Fizz' },
      { args: [10], expect: 'Buzz' },
      { args: [30], expect: 'FizzBuzz' },
      { args: [7], expect: '7' },
      { args: [15], expect: 'FizzBuzz' },
    ],
    bugs: [
      { id: 'wrong-divisor', python: [['n % 15 == 0', 'n % 10 == 0']], javascript: [['n % 15 === 0', 'n % 10 === 0']], example: 1 },
      { id: 'buzz-on-seven', python: [['n % 5 == 0', 'n % 7 == 0']], javascript: [['n % 5 === 0', 'n % 7 === 0']], example: 1 },
    ],
  },
  {
    id: 'reverse_words',
    names: { python: 'reverse_words', javascript: 'reverseWords' },
    python: py(['def reverse_words(s):', '    words = s.split()', '    return " ".join(reversed(words))']),
    javascript: js([
      'function reverseWords(s) {',
      "  const words = s.split(/\\s+/).filter((w) => w !== '');",
      "  return words.reverse().join(' ');",
      '}',
    ]),
    cases: [
      { args: ['hello world'], expect: 'world hello' },
      { args: ['a b c'], expect: 'c b a' },
      { args: ['one'], expect: 'one' },
      { args: ['  spaced   out '], expect: 'out spaced' },
    ],
    bugs: [
      {
        id: 'reverses-letters',
        python: [['" ".join(reversed(words))', '" ".join(w[::-1] for w in words)']],
        javascript: [["words.reverse().join(' ')", "words.map((w) => [...w].reverse().join('')).join(' ')"]],
        example: 0,
      },
      { id: 'no-spaces', python: [['" ".join', '"".join']], javascript: [[".join(' ')", ".join('')"]], example: 0 },
    ],
  },
  {
    id: 'mean',
    names: { python: 'mean', javascript: 'mean' },
    python: py(['def mean(xs):', '    if not xs:', '        return 0.0', '    return sum(xs) / len(xs)']),
    javascript: js([
      'function mean(xs) {',
      '  if (xs.length === 0) {',
      '    return 0;',
      '  }',
      '  return xs.reduce((a, b) => a + b, 0) / xs.length;',
      '}',
    ]),
    cases: [
      { args: [[1, 2]], expect: 1.5 },
      { args: [[4]], expect: 4 },
      { args: [[]], expect: 0 },
      { args: [[2, 4, 9]], expect: 5 },
    ],
    bugs: [
      {
        id: 'integer-division',
        python: [['sum(xs) / len(xs)', 'sum(xs) // len(xs)']],
        javascript: [
          ['return xs.reduce((a, b) => a + b, 0) / xs.length;', 'return Math.floor(xs.reduce((a, b) => a + b, 0) / xs.length);'],
        ],
        example: 0,
      },
      { id: 'off-by-one', python: [['/ len(xs)', '/ (len(xs) - 1)']], javascript: [['/ xs.length;', '/ (xs.length - 1);']], example: 1 },
    ],
  },
  {
    id: 'running_total',
    names: { python: 'running_total', javascript: 'runningTotal' },
    python: py([
      'def running_total(xs):',
      '    out = []',
      '    total = 0',
      '    for x in xs:',
      '        total += x',
      '        out.append(total)',
      '    return out',
    ]),
    javascript: js([
      'function runningTotal(xs) {',
      '  const out = [];',
      '  let total = 0;',
      '  for (const x of xs) {',
      '    total += x;',
      '    out.push(total);',
      '  }',
      '  return out;',
      '}',
    ]),
    cases: [
      { args: [[1, 2, 3]], expect: [1, 3, 6] },
      { args: [[]], expect: [] },
      { args: [[5]], expect: [5] },
      { args: [[2, -2, 4]], expect: [2, 0, 4] },
    ],
    bugs: [
      {
        id: 'appends-before-adding',
        python: [['        total += x\n        out.append(total)', '        out.append(total)\n        total += x']],
        javascript: [['    total += x;\n    out.push(total);', '    out.push(total);\n    total += x;']],
        example: 0,
      },
      {
        id: 'keeps-last-only',
        python: [['out.append(total)', 'out = [total]']],
        javascript: [['out.push(total);', 'out.splice(0, out.length, total);']],
        example: 0,
      },
    ],
  },
  {
    id: 'dedupe',
    names: { python: 'dedupe', javascript: 'dedupe' },
    python: py([
      'def dedupe(xs):',
      '    seen = set()',
      '    out = []',
      '    for x in xs:',
      '        if x not in seen:',
      '            seen.add(x)',
      '            out.append(x)',
      '    return out',
    ]),
    javascript: js([
      'function dedupe(xs) {',
      '  const seen = new Set();',
      '  const out = [];',
      '  for (const x of xs) {',
      '    if (!seen.has(x)) {',
      '      seen.add(x);',
      '      out.push(x);',
      '    }',
      '  }',
      '  return out;',
      '}',
    ]),
    cases: [
      { args: [[3, 1, 3, 2]], expect: [3, 1, 2] },
      { args: [[]], expect: [] },
      { args: [[1, 1, 1]], expect: [1] },
      { args: [[2, 1]], expect: [2, 1] },
    ],
    bugs: [
      { id: 'sorts', python: [['return out', 'return sorted(out)']], javascript: [['return out;', 'return out.sort();']], example: 0 },
      {
        id: 'never-marks-seen',
        python: [['            seen.add(x)\n', '']],
        javascript: [['      seen.add(x);\n', '']],
        example: 0,
      },
    ],
  },
];

/** Applies a bug's replacements to a source (each `find` must occur: the catalog spec checks it). */
export function seedBug(source: string, edits: [string, string][]): string {
  return edits.reduce((s, [find, replace]) => {
    if (!s.includes(find)) throw new Error(`catalog: ${JSON.stringify(find)} is not in the source`);
    return s.replace(find, replace);
  }, source);
}
