/**
 * A built-in repo-fix task as files: a small repository in Python (a package `app`, unittest
 * tests under tests/) or JavaScript (CommonJS under src/, `node --test` tests under test/), the
 * held-back tests (one test per case of every function in the module), its reference fix, and
 * the problem statement. Both languages run on what the sandbox has: /usr/bin/python3 and
 * /usr/bin/node, nothing to install.
 */
import type { RepoFixData } from '../task-data';
import { seedBug, type Bug, type CatalogFunction } from './catalog';

export type Language = 'python' | 'javascript';
export const LANGUAGES: readonly Language[] = ['python', 'javascript'];

/** One function of the module, with the bug seeded into it (if any). */
export interface Part {
  fn: CatalogFunction;
  bug: Bug | null;
}

const MODULE = { python: 'app/toolbox.py', javascript: 'src/toolbox.js' } as const;
export const TEST_COMMAND = {
  python: ['python3', '-m', 'unittest', 'discover', '-s', 'tests', '-t', '.', '-v'],
  javascript: ['node', '--test', '--test-reporter=tap'],
} as const;

/** A JSON value as a Python literal. */
export function pyLiteral(v: unknown): string {
  if (v === null) return 'None';
  if (v === true) return 'True';
  if (v === false) return 'False';
  if (Array.isArray(v)) return `[${v.map(pyLiteral).join(', ')}]`;
  if (typeof v === 'object')
    return `{${Object.entries(v)
      .map(([k, x]) => `${JSON.stringify(k)}: ${pyLiteral(x)}`)
      .join(', ')}}`;
  return JSON.stringify(v);
}

const literal = (lang: Language, v: unknown) => (lang === 'python' ? pyLiteral(v) : JSON.stringify(v));
const pascal = (id: string) => id.replace(/(^|_)(\w)/g, (_, __, c: string) => c.toUpperCase());

/** `name(args...)` as the language writes the call. */
export const callText = (lang: Language, fn: CatalogFunction, args: unknown[]) =>
  `${fn.names[lang]}(${args.map((a) => literal(lang, a)).join(', ')})`;

function moduleSource(lang: Language, parts: Part[], buggy: boolean): string {
  const bodies = parts.map(({ fn, bug }) => (buggy && bug ? seedBug(fn[lang], bug[lang]) : fn[lang]));
  if (lang === 'python') return bodies.join('\n\n');
  return `'use strict';\n\n${bodies.join('\n')}\nmodule.exports = { ${parts.map((p) => p.fn.names.javascript).join(', ')} };\n`;
}

/** The test ids each format reports for a function's cases. */
export function testNames(lang: Language, fn: CatalogFunction): string[] {
  return fn.cases.map((_, i) =>
    lang === 'python' ? `tests.test_${fn.id}.Test${pascal(fn.id)}.test_case_${i + 1}` : `${fn.names.javascript} case ${i + 1}`,
  );
}

function testFile(lang: Language, fn: CatalogFunction, cases: number[]): [string, string] {
  const name = fn.names[lang];
  if (lang === 'python') {
    const methods = cases.map(
      (i) =>
        `    def test_case_${i + 1}(self):\n        self.assertEqual(${callText(lang, fn, fn.cases[i].args)}, ${pyLiteral(fn.cases[i].expect)})\n`,
    );
    return [
      `tests/test_${fn.id}.py`,
      `import unittest\n\nfrom app.toolbox import ${name}\n\n\nclass Test${pascal(fn.id)}(unittest.TestCase):\n${methods.join('\n')}`,
    ];
  }
  const tests = cases.map(
    (i) =>
      `test(${JSON.stringify(`${name} case ${i + 1}`)}, () => {\n  assert.deepStrictEqual(${callText(lang, fn, fn.cases[i].args)}, ${JSON.stringify(fn.cases[i].expect)});\n});\n`,
  );
  return [
    `test/${fn.id}.test.js`,
    `'use strict';\n\nconst { test } = require('node:test');\nconst assert = require('node:assert/strict');\nconst { ${name} } = require('../src/toolbox.js');\n\n${tests.join('\n')}`,
  ];
}

function statement(lang: Language, parts: Part[], level: number): string {
  const broken = parts.filter((p) => p.bug !== null);
  const symptom = ({ fn, bug }: Part) => {
    const c = fn.cases[(bug as Bug).example];
    return `\`${callText(lang, fn, c.args)}\` should return \`${literal(lang, c.expect)}\``;
  };
  const run = `The tests run with \`${TEST_COMMAND[lang].join(' ')}\`.`;
  if (level === 1) return `There is a bug in \`${broken[0].fn.names[lang]}\` in \`${MODULE[lang]}\`: ${symptom(broken[0])}. Fix it. ${run}`;
  if (broken.length === 1) return `${symptom(broken[0])}, but it does not. Find the bug in this repository and fix it. ${run}`;
  return `Two things are broken in this repository: ${broken.map(symptom).join(', and ')}. Find both bugs and fix them. ${run}`;
}

/** The task's data (repository, held-back tests, command, reference fix) and its problem statement. */
export function renderTask(lang: Language, parts: Part[], level: number): { prompt: string; data: RepoFixData } {
  const held = Object.fromEntries(
    parts.map(({ fn }) =>
      testFile(
        lang,
        fn,
        fn.cases.map((_, i) => i),
      ),
    ),
  );
  const files: Record<string, string> = {
    [MODULE[lang]]: moduleSource(lang, parts, true),
    '.gitignore': lang === 'python' ? '__pycache__/\n*.pyc\n' : 'node_modules/\n',
    'README.md': `# toolbox\n\nSmall ${lang === 'python' ? 'Python' : 'JavaScript'} helpers in \`${MODULE[lang]}\`.\n\nTests: \`${TEST_COMMAND[lang].join(' ')}\`\n`,
  };
  if (lang === 'python') Object.assign(files, { 'app/__init__.py': '', 'tests/__init__.py': '' });
  // The easiest level shows the agent the failing case as a test; the held-back file replaces it.
  if (level === 1) {
    const [path, text] = testFile(lang, parts[0].fn, [(parts[0].bug as Bug).example]);
    files[path] = text;
  }
  return {
    prompt: statement(lang, parts, level),
    data: {
      repo: { files },
      test: {
        command: [...TEST_COMMAND[lang]],
        format: lang === 'python' ? 'unittest' : 'tap',
        files: held,
        names: parts.flatMap(({ fn }) => testNames(lang, fn)),
      },
      solution: { files: { [MODULE[lang]]: moduleSource(lang, parts, false) } },
    },
  };
}
