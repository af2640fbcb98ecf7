import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { normalizeConfig, toHfConfig } from '@anvil/engine';
import { QWEN3_DIR } from '@anvil/tokenizer/testing';
import { servedModelName, taskSetOf } from '../run/task-set';
import { parseRunConfig, runConfigInput } from './run-config';
import { checkModelDir, checkTaskFile, runConfigProblems } from './run-files';

const work = mkdtempSync(join(tmpdir(), 'anvil-user-run-spec-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A model directory as the checks see it: config.json, a weights file (not read), the Qwen3 tokenizer and its chat template. */
function modelDir(name: string, vocabSize: number, opts: { tokenizer?: boolean; weights?: boolean; modelType?: string } = {}): string {
  const dir = join(work, name);
  mkdirSync(dir, { recursive: true });
  const cfg = toHfConfig(
    normalizeConfig({ modelType: 'qwen2', vocabSize, hiddenSize: 8, intermediateSize: 16, numHiddenLayers: 1, numAttentionHeads: 2 }),
  );
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...cfg, ...(opts.modelType ? { model_type: opts.modelType } : {}) }));
  if (opts.weights !== false) writeFileSync(join(dir, 'model.safetensors'), '');
  if (opts.tokenizer !== false) for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(QWEN3_DIR, f), join(dir, f));
  return dir;
}

function file(name: string, text: string): string {
  const p = join(work, name);
  writeFileSync(p, text);
  return p;
}

const QWEN3_VOCAB = 151_669;

describe('a user run: the files a run configuration names', () => {
  it('takes a Llama/Qwen2 model directory whose vocabulary fits its tokenizer (embedding padding allowed)', () => {
    expect(checkModelDir(modelDir('ok', QWEN3_VOCAB))).toEqual([]);
    expect(checkModelDir(modelDir('padded', 151_936))).toEqual([]);
  });

  it('names everything wrong with a model directory', () => {
    expect(checkModelDir(join(work, 'missing'))).toEqual([expect.stringMatching(/is not a directory/)]);
    const bad = checkModelDir(modelDir('bad', 1000, { tokenizer: false, weights: false, modelType: 'gpt2' }));
    expect(bad).toEqual([
      expect.stringMatching(/model_type must be "llama" or "qwen2"/),
      expect.stringMatching(/neither model\.safetensors/),
      expect.stringMatching(/no tokenizer\.json/),
    ]);
    expect(checkModelDir(modelDir('small', 1000))).toEqual([
      expect.stringMatching(/vocab_size 1000 does not fit the tokenizer's 151669 ids/),
    ]);
  });

  it('checks a task JSONL: its lines, a train task, a verifier for every task', () => {
    const good = file(
      'good.jsonl',
      ['{"id":"a","prompt":"1+1?","data":{"answer":2}}', '{"id":"b","prompt":"2+2?","data":{"answer":4},"split":"eval"}'].join('\n'),
    );
    expect(checkTaskFile(good, { verifier: { kind: 'function', name: 'final-answer', timeoutMs: 10_000 } })).toEqual([]);
    expect(checkTaskFile(good, {})).toEqual([expect.stringMatching(/2 task\(s\) have no verifier \(a, b\)/)]);
    const noAnswer = file('no-answer.jsonl', '{"id":"a","prompt":"1+1?"}');
    expect(checkTaskFile(noAnswer, { verifier: { kind: 'function', name: 'final-answer', timeoutMs: 10_000 } })).toEqual([
      expect.stringMatching(/task a: the final-answer verifier needs data\.answer/),
    ]);
    const evalOnly = file('eval-only.jsonl', '{"id":"a","prompt":"x","split":"eval"}');
    expect(checkTaskFile(evalOnly, { env: 'chain-add' })).toEqual([expect.stringMatching(/has no train task/)]);
    const broken = file('broken.jsonl', ['{"id":"a","prompt":"x"}', '{not json', '{"prompt":"no id"}'].join('\n'));
    expect(checkTaskFile(broken, { env: 'chain-add' })).toEqual([
      expect.stringMatching(/line 2: invalid JSON/),
      expect.stringMatching(/line 3: id/),
    ]);
    expect(checkTaskFile(join(work, 'none.jsonl'), {})).toEqual([expect.stringMatching(/no such file/)]);
  });

  it('lists every problem at once: refused knobs and bad files together', () => {
    const tasks = file('bad.jsonl', '{"id":"a","prompt":"x"}\n{oops');
    const { cfg, problems } = runConfigProblems({
      model: modelDir('wrong', 1000, { tokenizer: false }),
      task: {
        set: tasks,
        bogus: 1,
        agent: { kind: 'black-box', name: 'x', command: ['/nonexistent/agent'], env: { API_TOKEN: 'x' } },
        env: 'nowhere',
      },
      algorithm: { loss: 'dpo' },
    });
    expect(cfg).toBeNull();
    const text = problems.join('\n');
    for (const want of [
      /task: Unrecognized key: "bogus"/,
      /algorithm\.loss/,
      /no tokenizer\.json/,
      /line 2: invalid JSON/,
      /\/nonexistent\/agent is not an executable file/,
      /credential-like/,
      /task\.env: unknown environment "nowhere"/,
    ])
      expect(text).toMatch(want);
  });

  it('checks relations the files do not show: a warm start needs chain-add, task.env is for a JSONL, toolDelay is chain-add', () => {
    const msg = (raw: Record<string, unknown>) => runConfigProblems(raw).problems.join('\n');
    const jsonl = file('plain.jsonl', '{"id":"a","prompt":"x","data":{"answer":1}}');
    expect(msg({ task: { set: jsonl, verifier: { kind: 'function', name: 'final-answer' } }, warmStart: { enabled: true } })).toMatch(
      /warmStart\.enabled: needs task\.set 'chain-add'/,
    );
    expect(msg({ task: { env: 'chain-add' } })).toMatch(/task\.env: is for a task JSONL/);
    expect(
      msg({ task: { set: jsonl, toolDelay: { kind: 'fixed', ms: 5 }, verifier: { kind: 'function', name: 'final-answer' } } }),
    ).toMatch(/task\.toolDelay/);
    expect(msg({ task: { toolDelay: { kind: 'pareto', scaleMs: 0, alpha: 1.5, capMs: 10 } } })).toMatch(/task\.toolDelay\.scaleMs/);
    expect(msg({ task: { set: jsonl, verifier: { kind: 'function', name: 'nope' } } })).toMatch(
      /"nope" is not a built-in verifier function/,
    );
    expect(msg({ task: { agent: { kind: 'black-box', name: 'x', command: ['sh'], shell: true } } })).toMatch(
      /task\.agent: Unrecognized key: "shell"/,
    );
  });

  it("checks what a sandboxed agent and verifier need: read-only paths, the agent's command inside its sandbox, each task's workspace snapshot", () => {
    const tasks = file(
      'snapshots.jsonl',
      ['{"id":"a","prompt":"x","data":{"answer":1},"workspace":"/nonexistent/snap-a"}', '{"id":"b","prompt":"x","data":{"answer":1}}'].join(
        '\n',
      ),
    );
    const { problems } = runConfigProblems({
      task: {
        set: tasks,
        agent: { kind: 'black-box', name: 'x', command: ['./run.sh'], cwd: work, readOnlyPaths: ['/nonexistent/ro'] },
        verifier: { kind: 'command', command: ['sh'], readOnlyPaths: ['/nonexistent/verifier'] },
      },
    });
    expect(problems).toEqual([
      expect.stringMatching(/^task\.set: task a: its workspace \/nonexistent\/snap-a \(the repository snapshot .*\) is not a directory/),
      'task.agent.readOnlyPaths: /nonexistent/ro does not exist',
      `task.agent.command: ./run.sh is not an executable file (relative to ${work})`,
      'task.verifier.readOnlyPaths: /nonexistent/verifier does not exist',
    ]);
    // This machine can start the local sandbox: no sandbox problem, and none for an agent that asks for none.
    const agent = { kind: 'black-box', name: 'x', command: ['sh', '-c', 'echo 1'] };
    expect(runConfigProblems({ task: { agent, verifier: { kind: 'function', name: 'final-answer' } } }).problems).toEqual([]);
    expect(runConfigProblems({ task: { agent: { ...agent, sandbox: 'none' } } }).problems).toEqual([]);
    expect(runConfigProblems({ task: { agent: { ...agent, sandbox: 'docker' } } }).problems.join('\n')).toMatch(/task\.agent\.sandbox/);
  });

  it('resolves a model directory, a task JSONL and an agent cwd relative to the config file', () => {
    const dir = join(work, 'cfgdir');
    mkdirSync(dir, { recursive: true });
    const cfgFile = join(dir, 'run.json');
    writeFileSync(
      cfgFile,
      JSON.stringify({ model: 'm', task: { set: 't.jsonl', agent: { kind: 'black-box', name: 'a', command: ['x'], cwd: 'agents' } } }),
    );
    const raw = runConfigInput({ file: cfgFile, env: {} }) as { model: string; task: { set: string; agent: { cwd: string } } };
    expect([raw.model, raw.task.set, raw.task.agent.cwd]).toEqual([join(dir, 'm'), join(dir, 't.jsonl'), join(dir, 'agents')]);
    writeFileSync(cfgFile, JSON.stringify({ model: 'tiny', task: { set: 'chain-add' } }));
    expect(runConfigInput({ file: cfgFile, env: {} })).toMatchObject({ model: 'tiny', task: { set: 'chain-add' } });
  });

  it('builds the task set: the built-in one as the main job declares it, a JSONL with the run agent, verifier and limits', () => {
    const builtin = taskSetOf(parseRunConfig({}));
    expect(builtin.spec).toEqual({
      id: 'chain-add',
      name: 'chain-add (built in)',
      env: 'chain-add',
      envConfig: { k: { min: 2, max: 3 }, maxOperand: 9, prompt: 'compact' },
      groupSize: 8,
      sampling: { temperature: 1, maxTokens: 64 },
    });
    const delayed = taskSetOf(parseRunConfig({ task: { toolDelay: { kind: 'pareto', scaleMs: 100, alpha: 1.5, capMs: 1000 } } }));
    expect(delayed.spec.envConfig).toMatchObject({ toolDelay: { kind: 'pareto', scaleMs: 100, alpha: 1.5, capMs: 1000 } });
    const agent = { kind: 'black-box' as const, name: 'py', command: ['python3', 'agent.py'] };
    const jsonl = taskSetOf(
      parseRunConfig({
        task: { set: '/data/my-tasks.jsonl', agent, verifier: { kind: 'function', name: 'final-answer' }, limits: { maxSteps: 4 } },
      }),
    );
    expect(jsonl.spec).toMatchObject({
      id: 'jsonl-my-tasks',
      name: '/data/my-tasks.jsonl',
      env: null,
      agent,
      verifier: { name: 'final-answer' },
      limits: { maxSteps: 4 },
    });
    expect(servedModelName(parseRunConfig({}))).toBe('anvil-tiny');
    expect(servedModelName(parseRunConfig({ model: '/models/Qwen2.5-0.5B-Instruct' }))).toBe('Qwen2.5-0.5B-Instruct');
    expect(servedModelName(parseRunConfig({ model: '/models/x', servedModelName: 'policy' }))).toBe('policy');
  });
});

describe('a known model by name', () => {
  it('is no path, and is checked like a model directory once it is fetched', () => {
    const dir = join(work, 'known');
    mkdirSync(dir, { recursive: true });
    const cfgFile = join(dir, 'run.json');
    writeFileSync(cfgFile, JSON.stringify({ model: 'smollm2-135m', dataDir: join(work, 'known-data') }));
    const raw = runConfigInput({ file: cfgFile, env: {} });
    expect(raw.model).toBe('smollm2-135m');
    // not fetched into this data directory yet: fetched at the start of the run, nothing to refuse
    expect(runConfigProblems(raw).problems).toEqual([]);
    expect(servedModelName(parseRunConfig(raw))).toBe('smollm2-135m');
    // a directory that only looks like a name is still a path
    expect(runConfigProblems({ model: 'smollm2-135m/' }).problems.join('\n')).toMatch(/is not a directory/);
  });
});
