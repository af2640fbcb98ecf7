import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GenerateRequest } from '@anvil/contracts';
import { ByteTokenizer } from '@anvil/tokenizer';
import { PRESET_NAMES, RolloutRuntime, type RolloutOutcome } from '@anvil/rollout-manager';
import { ADMIN_TOKEN, reply, startRolloutStack, until, type RolloutStack } from './fixtures/rollout-stack';

/**
 * Every harness preset, unchanged, as a black-box agent of the rollout manager in the local
 * sandbox, against the real gateway on PostgreSQL and Kafka with a scripted policy (so what each
 * agent does is known): each finishes, its calls are recorded, its answer and transcript are
 * read from where it leaves them. And mini-swe-agent on a repo-fix task: the scripted policy
 * fixes the bug with mini's bash tool and submits; the held-back tests in a fresh sandbox give
 * reward 1. (test/e2e/repo-fix-presets.e2e.spec.ts runs presets on the real tiny model.)
 */
const root = join(__dirname, '..', '..');
const tok = new ByteTokenizer();
const work = mkdtempSync(join(tmpdir(), 'anvil-it-presets-'));
let stack: RolloutStack;
let runtime: RolloutRuntime;
const outcomes: RolloutOutcome[] = [];

const call = (command: string) => `<tool_call>\n{"name": "bash", "arguments": {"command": ${JSON.stringify(command)}}}\n</tool_call>`;

/** mini-swe-agent on repo-fix: fix the bug, then submit; mini-swe-agent told to say done: submit "done"; every other agent: answer "done". */
function policy(req: GenerateRequest) {
  const text = tok.decode(req.promptIds);
  // mini-swe-agent answers only through its bash tool: its submission is what follows its submit line.
  if (text.includes('Please solve this issue: Say done.')) return reply(call("printf 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\\ndone\\n'"));
  if (text.includes('Please solve this issue')) {
    const results = (text.match(/<tool_response>/g) ?? []).length;
    return reply(results === 0 ? call("sed -i 's/x \\* 2/x \\/\\/ 2/' calc.py") : call('echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT'));
  }
  return reply('done');
}

const MODULE = 'def half(x):\n    return x * 2\n';
const TESTS =
  'import unittest\nfrom calc import half\n\nclass T(unittest.TestCase):\n    def test_eight(self):\n        self.assertEqual(half(8), 4)\n    def test_zero(self):\n        self.assertEqual(half(0), 0)\n';

beforeAll(async () => {
  // The presets at their pins (idempotent: nothing is fetched once they are there).
  const installed = spawnSync(process.execPath, [join(root, 'apps', 'anvil', 'bin', 'anvil.cjs'), 'agents', 'install', '--all'], {
    encoding: 'utf8',
  });
  if (installed.status !== 0) throw new Error(`anvil agents install --all failed: ${installed.stdout}${installed.stderr}`);
  stack = await startRolloutStack('presets', policy);
  runtime = new RolloutRuntime({
    gatewayUrl: stack.gatewayUrl,
    adminToken: ADMIN_TOKEN,
    bus: stack.bus,
    dataSource: stack.ds,
    config: {
      concurrency: 3,
      eta: 8,
      groupsPerStep: 8,
      admissionPollMs: 100,
      consumerGroup: `it.rm.presets.${Date.now()}`,
      repoRoot: root,
    },
    verifiers: {
      // 1 when the agent's answer (as its preset read it) is the scripted "done".
      done: ({ transcript }) => {
        const ok = transcript.finalAnswer?.trim() === 'done';
        return { outcomeReward: ok ? 1 : 0, success: ok };
      },
    },
  });
  runtime.onRolloutCompleted((o) => outcomes.push(o));
  await runtime.start();
}, 600_000);

afterAll(async () => {
  await runtime?.stop();
  await stack?.close();
  rmSync(work, { recursive: true, force: true });
});

const outcomesOf = (ids: string[], timeoutMs: number) =>
  until(
    'every rollout.completed',
    () => {
      const os = ids.map((id) => outcomes.find((o) => o.rolloutId === id));
      return os.every(Boolean) ? (os as RolloutOutcome[]) : undefined;
    },
    timeoutMs,
  );

async function recordedCalls(rolloutId: string): Promise<number> {
  const rows = (await stack.ds.query(
    `SELECT count(*)::int AS n FROM gateway_calls c JOIN gateway_sessions s ON s.id = c.session_id WHERE s.rollout_id = $1`,
    [rolloutId],
  )) as { n: number }[];
  return rows[0].n;
}

describe('harness presets in the local sandbox', () => {
  it('each preset runs its agent on the session, finishes, and its answer is read from where the agent leaves it', async () => {
    const ids: Record<string, string> = {};
    for (const preset of PRESET_NAMES) {
      await runtime.loadJsonl(
        {
          id: `preset-${preset}`,
          agent: { kind: 'black-box', preset, env: ['codex', 'claude-code', 'qwen-code'].includes(preset) ? { AGENT_COMPACT: '1' } : {} },
          verifier: { kind: 'function', name: 'done' },
          limits: { timeoutMs: 240_000, maxSteps: 4 },
        },
        JSON.stringify({ id: `say-${preset}`, prompt: 'Say done.' }),
      );
      ids[preset] = (await runtime.submit({ taskSetId: `preset-${preset}`, groupSize: 1 })).rolloutIds[0];
    }
    const done = await outcomesOf(Object.values(ids), 480_000);
    for (const [preset, id] of Object.entries(ids)) {
      const o = done.find((x) => x.rolloutId === id)!;
      const bb = o.blackBox!;
      expect(o.finishReason, `${preset}: ${o.error}\n${bb.stderr.slice(-2000)}`).toBe('completed');
      expect(bb.sandbox.backend).toBe('local');
      expect(o.numCalls, preset).toBeGreaterThan(0);
      expect(await recordedCalls(id)).toBe(o.numCalls);
      expect(o.outcomeReward, `${preset} answered ${JSON.stringify(bb.finalAnswer)}`).toBe(1);
    }
    // Where a harness keeps a transcript, the preset read it: the scripted answer is its last assistant message.
    for (const preset of ['codex', 'qwen-code', 'openai-agents', 'llm']) {
      const messages = done.find((x) => x.rolloutId === ids[preset])!.blackBox!.messages;
      expect(messages, preset).not.toBeNull();
      expect(
        messages!
          .filter((m) => m.role === 'assistant')
          .at(-1)
          ?.content?.trim(),
        preset,
      ).toBe('done');
    }
    // mini-swe-agent's trajectory: the task, and its one bash call (the submission).
    const mini = done.find((x) => x.rolloutId === ids['mini-swe-agent'])!.blackBox!.messages!;
    expect(mini.some((m) => m.role === 'user' && m.content?.includes('Say done.'))).toBe(true);
    expect(mini.find((m) => m.role === 'assistant')?.tool_calls?.[0].function.name).toBe('bash');
  }, 600_000);

  it('mini-swe-agent fixes a repo-fix task in its checkout; the held-back tests pass in a fresh sandbox', async () => {
    await runtime.loadJsonl(
      {
        id: 'repo-fix-mini',
        env: 'repo-fix',
        envConfig: { root: work },
        agent: { kind: 'black-box', preset: 'mini-swe-agent' },
        limits: { timeoutMs: 240_000, maxSteps: 4 },
      },
      JSON.stringify({
        id: 'half',
        prompt: 'half(8) should return 4. Fix calc.py.',
        data: {
          repo: { files: { 'calc.py': MODULE } },
          test: { command: 'python3 -m unittest -v test_calc', format: 'unittest', files: { 'test_calc.py': TESTS } },
        },
      }),
    );
    const [id] = (await runtime.submit({ taskSetId: 'repo-fix-mini', groupSize: 1 })).rolloutIds;
    const [o] = await outcomesOf([id], 300_000);
    expect(o.finishReason, `${o.error}\n${o.blackBox?.stderr.slice(-2000)}`).toBe('completed');
    expect(o).toMatchObject({ outcomeReward: 1, success: true, numCalls: 2 });
    // Its trajectory ends with the submission; the sed it ran is in its transcript.
    expect(JSON.stringify(o.blackBox!.messages)).toContain('sed -i');
  }, 400_000);

  it('a task set naming a preset that is not installed is refused before anything runs, naming the command', async () => {
    const prev = process.env.ANVIL_AGENTS_DIR;
    process.env.ANVIL_AGENTS_DIR = join(work, 'no-agents');
    try {
      await expect(
        runtime.loadJsonl(
          { id: 'preset-missing', agent: { kind: 'black-box', preset: 'codex' }, verifier: { kind: 'function', name: 'done' } },
          JSON.stringify({ id: 't', prompt: 'x' }),
        ),
      ).rejects.toThrow(
        /agent\.preset: agent preset codex \(@openai\/codex 0\.171\.0\) is not installed .*run `anvil agents install codex`/,
      );
    } finally {
      if (prev === undefined) delete process.env.ANVIL_AGENTS_DIR;
      else process.env.ANVIL_AGENTS_DIR = prev;
    }
  });
});
