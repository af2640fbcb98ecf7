import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Model } from '@anvil/engine';
import { loadChatFormat } from '@anvil/tokenizer';
import { QWEN3_DIR } from '@anvil/tokenizer/testing';
import { pythonAgentPaths } from '../integration/fixtures/agent-paths';
import { anvilTrain } from '@anvil/testing';

/**
 * A user's own run through the main job's one command, `anvil train --config run.json`, in
 * one process: a Hugging Face model directory the engine saved (a tiny Qwen2-architecture model,
 * random init, with the real Qwen3 tokenizer.json and its chat template from tokenizer_config.json),
 * a task JSONL, a black-box agent (examples/python-agent: a Python program on the official openai
 * package, the tools put it first on PATH) and a command verifier. No warm start: RL starts from the
 * model as given. It trains a few steps through the gateway (the model's own chat template), the
 * Data Pool and the trainer, publishes versions the proxy serves, and reports.
 *
 * The verifier gives partial credit (the share of printable ASCII in the answer): an untrained
 * model's replies differ in it, so groups have reward variance and batches form. This tests the
 * plumbing of a user run, not learning (test/e2e/main-learns.e2e.spec.ts does that).
 */
const work = mkdtempSync(join(tmpdir(), 'anvil-user-run-'));
// The verifier command runs sandboxed, as a uid of its own that reads its script from here.
chmodSync(work, 0o755);
afterAll(() => rmSync(work, { recursive: true, force: true }));
const SERVED = 'tiny-qwen2';

beforeAll(async () => {
  const model = join(work, 'model');
  mkdirSync(model);
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(QWEN3_DIR, f), join(model, f));
  const vocabSize = loadChatFormat(model).tokenizer.vocabSize;
  const m = Model.create(
    {
      modelType: 'qwen2',
      vocabSize,
      hiddenSize: 64,
      intermediateSize: 128,
      numHiddenLayers: 2,
      numAttentionHeads: 4,
      numKeyValueHeads: 2,
      tieWordEmbeddings: true,
      maxPositionEmbeddings: 4096,
    },
    { seed: 7 },
  );
  await m.save(model);
  m.dispose();
  const tasks = Array.from({ length: 12 }, (_, i) => ({
    id: `t${i}`,
    prompt: `What is ${i + 2}+${3 * i + 1}? Answer with the number.`,
    data: { answer: 4 * i + 3 },
    split: i >= 8 ? 'eval' : 'train',
  }));
  writeFileSync(join(work, 'tasks.jsonl'), tasks.map((t) => JSON.stringify(t)).join('\n') + '\n');
  writeFileSync(
    join(work, 'verifier.mjs'),
    `let input = '';
process.stdin.on('data', (d) => (input += d));
process.stdin.on('end', () => {
  const { task, transcript } = JSON.parse(input);
  const chars = [...(transcript.finalAnswer ?? '')];
  const ascii = chars.filter((c) => c >= ' ' && c <= '~').length;
  process.stdout.write(JSON.stringify({ outcomeReward: chars.length ? ascii / chars.length : 0, success: (transcript.finalAnswer ?? '').trim() === String(task.data.answer) }));
});
`,
  );
}, 120_000);

describe('anvil train --config run.json: a user run', () => {
  it(
    'trains a Hugging Face model directory on a task JSONL with a black-box agent and a command verifier, and reports',
    { timeout: 600_000 },
    async () => {
      const configFile = join(work, 'run.json');
      writeFileSync(
        configFile,
        JSON.stringify({
          dataDir: join(work, 'data'),
          // relative to the config file
          model: 'model',
          servedModelName: SERVED,
          task: {
            set: 'tasks.jsonl',
            evalTasks: 4,
            agent: {
              kind: 'black-box',
              name: 'python-agent',
              command: ['python3', 'examples/python-agent/agent.py'],
              env: { AGENT_MODEL: SERVED, AGENT_MAX_TURNS: '2' },
              readOnlyPaths: ['examples/python-agent', ...pythonAgentPaths()],
            },
            verifier: { kind: 'command', command: ['node', join(work, 'verifier.mjs')], mode: 'json', readOnlyPaths: [work] },
            limits: { timeoutMs: 120_000 },
          },
          rollouts: { groupSize: 4, concurrency: 8, eta: 1 },
          scheduler: { groupsPerBatch: 2 },
          algorithm: { lr: 1e-3, warmupSteps: 0 },
          budget: { steps: 3, stallSeconds: 120 },
          eval: { everyVersions: 3, samplesPerTask: 1 },
          checkpointEvery: 3,
        }),
      );
      const { code, out, err } = await anvilTrain(configFile);
      expect(code, `${out.slice(-3000)}\n${err.slice(-3000)}`).toBe(0);
      expect(out).toContain(`model: ${join(work, 'model')} (served as ${SERVED}), RL starts from its weights as given (no warm start)`);
      const lines = out.trim().split('\n');
      const summary = JSON.parse(lines[lines.length - 1]) as {
        heldOutSuccess: { warmStart: number; final: number };
        rlSteps: number;
        rlStoppedBy: string;
        finalVersion: number;
        trainRollouts: number;
        warmStart: { enabled: boolean };
        mismatch: { meanAbsDeltaLogp: number; tokens: number };
      };
      expect(summary).toMatchObject({ rlSteps: 3, rlStoppedBy: 'steps', finalVersion: 3, warmStart: { enabled: false } });
      expect(summary.trainRollouts).toBeGreaterThanOrEqual(3 * 2 * 4);
      // held-out tasks (the JSONL's eval lines) evaluated before step 1 and at the end, each pinned to its version
      const evals = [...out.matchAll(/^held-out success ([\d.]+)% at policy version (\d+)/gm)].map((m) => Number(m[2]));
      expect(evals).toEqual([0, 3]);
      for (const v of [summary.heldOutSuccess.warmStart, summary.heldOutSuccess.final]) expect(v >= 0 && v <= 1).toBe(true);
      // the engine generated and trained: recorded vs recomputed log-probs of the current version's tokens agree
      expect(summary.mismatch.tokens).toBeGreaterThan(0);
      expect(summary.mismatch.meanAbsDeltaLogp).toBeLessThan(1e-5);
      const report = out.match(/^report: (.+)$/m)?.[1] as string;
      expect(existsSync(report)).toBe(true);
      const saved = JSON.parse(readFileSync(join(dirname(report), 'summary.json'), 'utf8')) as {
        mismatchBySplit: { key: string }[];
        evals: { tasks: number }[];
      };
      expect(saved.mismatchBySplit.map((s) => s.key)).toEqual(['context=append_only agent=black-box']);
      expect(saved.evals.map((e) => e.tasks)).toEqual([4, 4]);
      // every published version is a servable Hugging Face directory of the user's model family, and the weights moved
      const v3 = join(out.match(/^checkpoints: (.+)$/m)?.[1] as string, 'v3');
      expect(JSON.parse(readFileSync(join(v3, 'config.json'), 'utf8'))).toMatchObject({ model_type: 'qwen2', vocab_size: 151_669 });
      expect(existsSync(join(v3, 'tokenizer.json')) && existsSync(join(v3, 'tokenizer_config.json'))).toBe(true);
      expect(readFileSync(join(v3, 'model.safetensors')).equals(readFileSync(join(work, 'model', 'model.safetensors')))).toBe(false);
    },
  );

  it('refuses a bad run config before starting anything, every problem at once (exit 78)', { timeout: 120_000 }, async () => {
    const bad = join(work, 'bad-model');
    mkdirSync(bad);
    writeFileSync(join(bad, 'config.json'), JSON.stringify({ model_type: 'gpt2' }));
    writeFileSync(join(work, 'bad.jsonl'), '{"id":"a","prompt":"x"}\n{oops\n');
    const configFile = join(work, 'bad-run.json');
    writeFileSync(
      configFile,
      JSON.stringify({
        dataDir: join(work, 'bad-data'),
        model: 'bad-model',
        task: { set: 'bad.jsonl', agent: { kind: 'black-box', name: 'x', command: ['/nonexistent/agent'] }, speed: 3 },
        algorithm: { loss: 'dpo', lr: -1 },
      }),
    );
    const { code, err } = await anvilTrain(configFile);
    expect(code, err).toBe(78);
    for (const want of [
      /task: Unrecognized key: "speed"/,
      /algorithm\.loss/,
      /algorithm\.lr/,
      /model_type must be "llama" or "qwen2"/,
      /no tokenizer\.json/,
      /bad\.jsonl line 2: invalid JSON/,
      /\/nonexistent\/agent is not an executable file/,
    ])
      expect(err).toMatch(want);
    expect(existsSync(join(work, 'bad-data'))).toBe(false);
  });
});
