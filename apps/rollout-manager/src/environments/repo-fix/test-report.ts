/**
 * Reads per-test results from a test command's output, so a repo-fix rollout earns partial
 * credit per held-back test. Formats:
 *
 *   unittest   Python's `unittest -v` ("test_x (pkg.mod.Class.test_x) ... ok|FAIL|ERROR|skipped")
 *   tap        TAP 13/14 top-level lines ("ok 1 - name", "not ok 2 - name"): `node --test
 *              --test-reporter=tap`, tap producers of most languages
 *   pytest     `pytest -rA` summary ("PASSED path::test") or `-v` lines ("path::test PASSED")
 *   exit-code  one test, the whole command: exit 0 passes
 *
 * A test reported more than once keeps its worst result (a failure anywhere fails it).
 */
export const TEST_FORMATS = ['unittest', 'tap', 'pytest', 'exit-code'] as const;
export type TestFormat = (typeof TEST_FORMATS)[number];

export type TestStatus = 'passed' | 'failed' | 'skipped';

/** Test id → status, in the order first reported. */
export type TestResults = Map<string, TestStatus>;

const worse = (a: TestStatus | undefined, b: TestStatus): TestStatus =>
  a === 'failed' || b === 'failed' ? 'failed' : a === 'passed' ? a : b;

function record(out: TestResults, id: string, status: TestStatus): void {
  out.set(id, worse(out.get(id), status));
}

function unittest(text: string, out: TestResults): void {
  // "test_x (pkg.mod.Class.test_x) ... ok" (3.11+ puts the method in the id, earlier versions do not);
  // a docstring's first line may stand between the name and the dots.
  const line = /^(\w+) \(([\w.]+)\)(?:\n[^\n]*?)? \.\.\. (ok|FAIL|ERROR|skipped|expected failure|unexpected success)/gm;
  for (const m of text.matchAll(line)) {
    const [, method, where, word] = m;
    const id = where.endsWith(`.${method}`) ? where : `${where}.${method}`;
    record(out, id, word === 'ok' || word === 'expected failure' ? 'passed' : word === 'skipped' ? 'skipped' : 'failed');
  }
  // The summary's "FAIL: name (id)" / "ERROR: name (id)" blocks, which also name a module that failed to import.
  for (const m of text.matchAll(/^(?:FAIL|ERROR): (\w+) \(([\w.]+)\)/gm)) {
    const [, method, where] = m;
    record(out, where.endsWith(`.${method}`) ? where : `${where}.${method}`, 'failed');
  }
}

function tap(text: string, out: TestResults): void {
  // Top-level results only: subtests are indented.
  for (const m of text.matchAll(
    /^(not )?ok\b[ \t]*\d*[ \t]*(?:-[ \t]*)?([^#\n]*?)[ \t]*(#[ \t]*(?:[Ss][Kk][Ii][Pp]|[Tt][Oo][Dd][Oo])\b[^\n]*)?$/gm,
  )) {
    const [, not, name, directive] = m;
    // A skipped test, or a TODO one (expected to fail), has not passed.
    record(out, name.trim() || '(unnamed)', directive ? 'skipped' : not ? 'failed' : 'passed');
  }
}

const PYTEST_WORDS: Record<string, TestStatus> = {
  PASSED: 'passed',
  XFAIL: 'passed',
  FAILED: 'failed',
  ERROR: 'failed',
  XPASS: 'failed',
  SKIPPED: 'skipped',
};

function pytest(text: string, out: TestResults): void {
  for (const m of text.matchAll(/^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+::\S+)/gm)) record(out, m[2], PYTEST_WORDS[m[1]]);
  for (const m of text.matchAll(/^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b/gm)) record(out, m[1], PYTEST_WORDS[m[2]]);
}

/** The results a test command reported (stdout and stderr together: unittest writes to stderr). */
export function parseTestOutput(format: TestFormat, output: string, exitCode: number | null): TestResults {
  const out: TestResults = new Map();
  const text = output.replace(/\r\n/g, '\n');
  if (format === 'unittest') unittest(text, out);
  else if (format === 'tap') tap(text, out);
  else if (format === 'pytest') pytest(text, out);
  else out.set('test command', exitCode === 0 ? 'passed' : 'failed');
  return out;
}

/** Whether reported id `id` is the expected test `name`: the same, or `name` is its last dotted (or ::) part(s). */
export function sameTest(id: string, name: string): boolean {
  return id === name || id.endsWith(`.${name}`) || id.endsWith(`::${name}`);
}

export interface TestScore {
  /** Share of the counted tests that passed (0 when none are counted). */
  reward: number;
  passed: number;
  total: number;
  /** Counted tests that did not pass (failed, skipped or never reported), the first few. */
  notPassed: string[];
}

/**
 * Scores results against the tests that count: `names` (a test never reported counts as failed:
 * its file did not load, say), or every reported test when the task names none.
 */
export function scoreTests(results: TestResults, names: readonly string[] | undefined): TestScore {
  const counted: [string, TestStatus | undefined][] = names
    ? names.map((n) => {
        let status: TestStatus | undefined;
        for (const [id, s] of results) if (sameTest(id, n)) status = worse(status, s);
        return [n, status];
      })
    : [...results];
  const passed = counted.filter(([, s]) => s === 'passed').length;
  return {
    reward: counted.length ? passed / counted.length : 0,
    passed,
    total: counted.length,
    notPassed: counted
      .filter(([, s]) => s !== 'passed')
      .slice(0, 10)
      .map(([n, s]) => `${n} (${s ?? 'not run'})`),
  };
}
