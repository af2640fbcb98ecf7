import { describe, expect, it } from 'vitest';
import { parseTestOutput, scoreTests } from './test-report';

describe('repo-fix test reports', () => {
  it('reads unittest -v lines (3.11 ids and older ones), docstring lines and the FAIL/ERROR summary', () => {
    const out = [
      'test_case_1 (tests.test_clamp.TestClamp.test_case_1) ... ok',
      'test_case_2 (tests.test_clamp.TestClamp) ... FAIL',
      'test_doc (tests.test_x.TestX.test_doc)',
      'Checks the thing. ... ok',
      "test_skip (tests.test_x.TestX.test_skip) ... skipped 'no'",
      'test_x (unittest.loader._FailedTest.test_x) ... ERROR',
      '',
      '======================================================================',
      'ERROR: test_y (tests.test_x.TestX.test_y)',
    ].join('\n');
    expect([...parseTestOutput('unittest', out, 1)]).toEqual([
      ['tests.test_clamp.TestClamp.test_case_1', 'passed'],
      ['tests.test_clamp.TestClamp.test_case_2', 'failed'],
      ['tests.test_x.TestX.test_doc', 'passed'],
      ['tests.test_x.TestX.test_skip', 'skipped'],
      ['unittest.loader._FailedTest.test_x', 'failed'],
      ['tests.test_x.TestX.test_y', 'failed'],
    ]);
  });

  it('reads top-level TAP results (node --test), with directives and no subtests', () => {
    const out = [
      'TAP version 13',
      '# Subtest: clamp case 1',
      'ok 1 - clamp case 1',
      '  ---',
      '  duration_ms: 0.5',
      '  ...',
      'not ok 2 - clamp case 2',
      '    not ok 1 - nested part',
      'ok 3 - later # SKIP not today',
      'not ok 4 - pending # todo',
      'ok 5 - clamp case 1',
      '1..5',
    ].join('\n');
    expect([...parseTestOutput('tap', out, 1)]).toEqual([
      ['clamp case 1', 'passed'],
      ['clamp case 2', 'failed'],
      ['later', 'skipped'],
      ['pending', 'skipped'],
    ]);
    // A test reported twice keeps its worst result.
    expect(parseTestOutput('tap', 'ok 1 - a\nnot ok 2 - a\nok 3 - a\n', 1).get('a')).toBe('failed');
  });

  it('reads pytest -rA summaries and -v lines', () => {
    const out = [
      'tests/test_a.py::test_one PASSED                 [ 33%]',
      'tests/test_a.py::test_two FAILED                 [ 66%]',
      'PASSED tests/test_a.py::test_one',
      'FAILED tests/test_a.py::test_two - AssertionError: 1 != 2',
      'ERROR tests/test_b.py::test_three - ImportError',
      'SKIPPED [1] tests/test_c.py:3: no',
    ].join('\n');
    expect([...parseTestOutput('pytest', out, 1)]).toEqual([
      ['tests/test_a.py::test_one', 'passed'],
      ['tests/test_a.py::test_two', 'failed'],
      ['tests/test_b.py::test_three', 'failed'],
    ]);
  });

  it('exit-code: the whole command is one test', () => {
    expect([...parseTestOutput('exit-code', 'anything', 0)]).toEqual([['test command', 'passed']]);
    expect([...parseTestOutput('exit-code', '', null)]).toEqual([['test command', 'failed']]);
  });

  it('scores the named tests (by full id or last part; never reported = failed) or every reported one', () => {
    const results = parseTestOutput('unittest', 'test_a (t.T.test_a) ... ok\ntest_b (t.T.test_b) ... FAIL\n', 1);
    expect(scoreTests(results, ['t.T.test_a', 'test_b', 'test_c'])).toEqual({
      reward: 1 / 3,
      passed: 1,
      total: 3,
      notPassed: ['test_b (failed)', 'test_c (not run)'],
    });
    expect(scoreTests(results, undefined)).toMatchObject({ reward: 0.5, passed: 1, total: 2 });
    expect(scoreTests(new Map(), undefined)).toMatchObject({ reward: 0, total: 0 });
    // A name is matched on a dotted boundary only.
    expect(scoreTests(results, ['est_a']).passed).toBe(0);
  });
});
