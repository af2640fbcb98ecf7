#!/usr/bin/env node
// `npm test`: every test, from a fresh clone. Installs (when missing) and starts a fresh
// Kafka broker and PostgreSQL cluster on ports of its own, checks formatting (prettier, width
// 140), type-checks, lints (including the Nx module boundaries), builds dist/ for the end-to-end
// tests, runs the unit, integration and e2e projects, stops the infrastructure, and ends with one
// summary line "N passed, N failed, N skipped". The CUDA engine sources are compiled too (nvcc
// from the machine, or CUDA 13.0 fetched from PyPI into .cache/cuda-toolkit): without a GPU its
// tests are skipped with the reason, but a CUDA source that no longer compiles fails the run.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
// Ports of the test stack, apart from the defaults a developer's own stack uses, so a test run
// never wipes or stops a broker somebody else is using.
process.env.KAFKA_PORT ??= '29092';
process.env.PG_PORT ??= '25432';
process.env.NX_DAEMON = 'false';
process.env.NX_NO_CLOUD = 'true';
const { startStack, stopStack } = await import('../infra/lib.mjs');

const steps = [];
function step(name, cmd, args, env = {}) {
  const started = Date.now();
  console.log(`\n=== ${name}: ${cmd} ${args.join(' ')}`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit', env: { ...process.env, ...env } });
  steps.push({ name, ok: r.status === 0, seconds: (Date.now() - started) / 1000 });
  return r.status === 0;
}

/**
 * Steps in lanes: the lanes run side by side, the steps of a lane one after another. Each step's
 * output is held and printed whole when it ends, so the log reads as if they ran in turn. The
 * checks before the tests are single-threaded (tsc, prettier, eslint, nvcc), so two lanes on two
 * cores take half the time.
 */
async function stepsInLanes(lanes) {
  const runOne = ([name, cmd, args]) =>
    new Promise((resolve) => {
      const started = Date.now();
      const child = spawn(cmd, args, { cwd: root, env: process.env, stdio: ['ignore', 'pipe', 'pipe'] });
      const out = [];
      child.stdout.on('data', (d) => out.push(d));
      child.stderr.on('data', (d) => out.push(d));
      const done = (ok) => {
        console.log(`\n=== ${name}: ${cmd} ${args.join(' ')}`);
        process.stdout.write(Buffer.concat(out));
        steps.push({ name, ok, seconds: (Date.now() - started) / 1000 });
        resolve(ok);
      };
      child.on('error', (err) => {
        out.push(Buffer.from(`${err.message}\n`));
        done(false);
      });
      child.on('close', (code) => done(code === 0));
    });
  await Promise.all(
    lanes.map(async (lane) => {
      for (const s of lane) await runOne(s);
    }),
  );
}

let stack;
let summary = null;
let failures = [];

/**
 * Every failed test (and failed file) of a vitest JSON report, one line each with the first line
 * of its error: CI keeps only the tail of the output, and without this the tail names no test.
 */
function failedTests(r) {
  const out = [];
  for (const f of r.testResults ?? []) {
    const file = f.name.startsWith(root) ? f.name.slice(root.length + 1) : f.name;
    const bad = (f.assertionResults ?? []).filter((a) => a.status === 'failed');
    for (const a of bad) out.push(`${file} > ${a.fullName}: ${firstLine(a.failureMessages?.[0])}`);
    if (f.status === 'failed' && bad.length === 0) out.push(`${file}: ${firstLine(f.message)}`);
  }
  return out;
}

function firstLine(text) {
  const line =
    String(text ?? '')
      .split('\n')
      .find((l) => l.trim() !== '') ?? '';
  // eslint-disable-next-line no-control-regex
  return line
    .replace(/\u001b\[[0-9;]*m/g, '')
    .trim()
    .slice(0, 300);
}
try {
  const only = process.argv.slice(2);
  console.log('=== infrastructure: fresh Kafka broker and PostgreSQL cluster');
  stack = await startStack({ fresh: true });
  const env = { ...stack.env, CI: process.env.CI ?? '' };
  await stepsInLanes([
    [
      ['cuda compile', 'node', ['tools/build/native-cuda.mjs', '--fetch-toolkit']],
      ['build', 'node', ['tools/build/build.mjs']],
    ],
    [
      ['typecheck', 'npx', ['tsc', '-p', 'tsconfig.json', '--noEmit']],
      ['format', 'npx', ['prettier', '--check', '--log-level', 'warn', '.']],
      ['lint', 'node', ['tools/build/lint.mjs']],
    ],
  ]);
  step('sandbox tools', 'npx', ['tsx', 'tools/sandbox/install.ts']);
  mkdirSync(join(root, '.cache'), { recursive: true });
  // The black-box tests run Python agents: ours on the official openai package
  // (examples/python-agent) and a third-party agent program, the llm CLI (examples/llm-cli-agent).
  // They go into a venv of the project's own (PyPI), first on the tests' PATH, so a fresh machine
  // needs nothing installed by hand. The venv is built on the system's Python (/usr/bin/python3)
  // where there is one: sandboxed agents see /usr and their read-only paths (this venv among them),
  // so a venv of a Python under a private home (pyenv's) would point nowhere in there. Outside a
  // sandbox it works the same.
  const venv = join(root, '.cache', 'python-agents');
  const python = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
  const builtOn = existsSync(join(venv, 'pyvenv.cfg'))
    ? /^home\s*=\s*(.*)$/m.exec(readFileSync(join(venv, 'pyvenv.cfg'), 'utf8'))?.[1]
    : null;
  if (!existsSync(join(venv, 'bin', 'python3')) || (python.startsWith('/usr/') && !builtOn?.startsWith('/usr/')))
    step('python venv', python, ['-m', 'venv', '--clear', venv]);
  step('python agents', join(venv, 'bin', 'pip'), [
    'install',
    '--quiet',
    '--disable-pip-version-check',
    '-r',
    'examples/python-agent/requirements.txt',
    '-r',
    'examples/llm-cli-agent/requirements.txt',
    '-r',
    'test/clients/requirements.txt',
  ]);
  env.PATH = `${join(venv, 'bin')}:${process.env.PATH ?? ''}`;
  const report = join(root, '.cache', 'vitest-report.json');
  step(
    'tests',
    'npx',
    [
      'vitest',
      'run',
      '--project',
      'unit',
      '--project',
      'integration',
      '--project',
      'e2e',
      '--reporter=default',
      '--reporter=json',
      `--outputFile.json=${report}`,
      ...only,
    ],
    env,
  );
  // The learning test (anvil train must raise held-out success) runs alone: beside the other
  // projects it took both cores for minutes and starved their timeouts.
  if (only.length === 0) {
    const learningReport = join(root, '.cache', 'vitest-learning-report.json');
    if (
      !step(
        'learning test',
        'npx',
        ['vitest', 'run', '--project', 'learning', '--reporter=default', '--reporter=json', `--outputFile.json=${learningReport}`],
        env,
      )
    ) {
      try {
        failures.push(...failedTests(JSON.parse(readFileSync(learningReport, 'utf8'))));
      } catch {
        failures.push('learning test: no report (see its output above)');
      }
    }
  }
  try {
    const r = JSON.parse(readFileSync(report, 'utf8'));
    summary = {
      passed: r.numPassedTests,
      failed: r.numFailedTests,
      skipped: r.numPendingTests + r.numTodoTests,
      suitesFailed: r.numFailedTestSuites,
    };
    failures.unshift(...failedTests(r));
  } catch {
    summary = null;
  }
} catch (err) {
  console.error(`run-all: ${err.message}`);
  steps.push({ name: 'infrastructure', ok: false, seconds: 0 });
} finally {
  if (stack) await stopStack().catch((err) => console.error(`run-all: stopping infrastructure failed: ${err.message}`));
}

if (failures.length > 0) {
  console.log('\n=== failed tests');
  for (const f of failures) console.log(`FAIL ${f}`);
}
console.log('\n=== steps');
for (const s of steps) console.log(`${s.ok ? 'ok  ' : 'FAIL'} ${s.name.padEnd(16)} ${s.seconds.toFixed(1)} s`);
const failedSteps = steps.filter((s) => !s.ok && s.name !== 'tests');
if (summary) {
  // A failed non-test step (typecheck, lint, build) counts as one failure, so the closing line
  // never says "0 failed" for a broken tree.
  const failed = summary.failed + failedSteps.length + (summary.failed === 0 ? summary.suitesFailed : 0);
  console.log(`${summary.passed} passed, ${failed} failed, ${summary.skipped} skipped`);
  process.exit(failed === 0 && steps.every((s) => s.ok) ? 0 : 1);
}
console.log(`0 passed, ${Math.max(1, failedSteps.length)} failed`);
process.exit(1);
