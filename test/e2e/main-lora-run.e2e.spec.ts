import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkpointDigest, Model } from '@anvil/engine';
import { anvilTrain } from '@anvil/testing';

/**
 * LoRA through the whole loop, in one process: `anvil train` with algorithm.lora on the built-in
 * tiny model (random init, no warm start), versions published as adapters. The trainer trains
 * adapters over the frozen starting weights and publishes each version as a PEFT adapter over that
 * base; the inference-proxy merges each into its copy of the base and serves it. The train/inference
 * mismatch of the current version's tokens (recorded by the proxy, recomputed by the trainer with the
 * adapters unmerged) shows the proxy served exactly the trained policy.
 *
 * The verifier gives partial credit (the share of printable ASCII in the answer), so an untrained
 * model's groups have reward variance and batches form (as in main-user-run.e2e.spec.ts).
 */
const work = mkdtempSync(join(tmpdir(), 'anvil-lora-run-'));
// The verifier command runs sandboxed, as a uid of its own that reads its script from here.
chmodSync(work, 0o755);
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('anvil train with algorithm.lora', () => {
  it('trains adapters on the tiny model, publishes them as adapters the proxy serves, and completes', { timeout: 900_000 }, async () => {
    const tasks = Array.from({ length: 12 }, (_, i) => ({
      id: `t${i}`,
      prompt: `What is ${i + 2}+${3 * i + 1}?`,
      data: { answer: 4 * i + 3 },
      split: i >= 10 ? 'eval' : 'train',
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
    const configFile = join(work, 'run.json');
    writeFileSync(
      configFile,
      JSON.stringify({
        dataDir: join(work, 'data'),
        warmStart: { enabled: false },
        task: {
          set: 'tasks.jsonl',
          evalTasks: 2,
          verifier: { kind: 'command', command: ['node', join(work, 'verifier.mjs')], mode: 'json', readOnlyPaths: [work] },
          limits: { maxSteps: 1, timeoutMs: 120_000 },
        },
        // on-policy (eta 0): every batch after the first holds tokens of an adapter version the trainer
        // holds, so the mismatch below compares the proxy's merged adapters with the trainer's own
        rollouts: { groupSize: 4, concurrency: 8, eta: 0, maxTokensPerCall: 24 },
        scheduler: { groupsPerBatch: 2 },
        algorithm: { lora: { rank: 4, alpha: 16 }, publish: 'adapter', lr: 1e-2, warmupSteps: 0, miniBatches: 2 },
        budget: { steps: 3, stallSeconds: 120 },
        eval: { everyVersions: 3, samplesPerTask: 1 },
        checkpointEvery: 2,
      }),
    );
    const { code, out, err } = await anvilTrain(configFile);
    expect(code, `${out.slice(-3000)}\n${err.slice(-3000)}`).toBe(0);
    const summary = JSON.parse(out.trim().split('\n').pop() as string) as {
      rlSteps: number;
      rlStoppedBy: string;
      finalVersion: number;
      mismatch: { meanAbsDeltaLogp: number; tokens: number };
    };
    expect(summary).toMatchObject({ rlSteps: 3, rlStoppedBy: 'steps', finalVersion: 3 });
    // held-out evaluations pinned to version 0 and to the last adapter version, which the proxy served
    expect([...out.matchAll(/^held-out success [\d.]+% at policy version (\d+)/gm)].map((m) => Number(m[1]))).toEqual([0, 3]);
    // the proxy's recorded log-probs of the current version's tokens are the trainer's (base + unmerged adapters)
    expect(summary.mismatch.tokens).toBeGreaterThan(0);
    expect(summary.mismatch.meanAbsDeltaLogp).toBeLessThan(1e-4);

    // every version on disk is a PEFT adapter over the run's starting weights; the resume point carries AdamW's state
    const checkpoints = /^checkpoints: (.+)$/m.exec(out)?.[1] as string;
    expect(
      readdirSync(checkpoints)
        .filter((f) => /^v\d+$/.test(f))
        .sort(),
    ).toEqual(['v1', 'v2', 'v3']);
    for (const v of ['v1', 'v2', 'v3']) {
      expect(existsSync(join(checkpoints, v, 'adapter_model.safetensors')) && !existsSync(join(checkpoints, v, 'config.json')), v).toBe(
        true,
      );
      expect(JSON.parse(readFileSync(join(checkpoints, v, 'adapter_config.json'), 'utf8'))).toMatchObject({
        peft_type: 'LORA',
        r: 4,
        lora_alpha: 16,
        target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
      });
    }
    const state = JSON.parse(readFileSync(join(checkpoints, 'v2', 'trainer-state.json'), 'utf8'));
    expect(state).toMatchObject({ version: 2, lora: { adapterDir: '.', sha256: await checkpointDigest(join(checkpoints, 'v2')) } });
    expect(existsSync(join(checkpoints, 'v2', 'adapter_optimizer.safetensors'))).toBe(true);
    // the adapters moved: applied to their base they change the policy
    const base = JSON.parse(readFileSync(join(checkpoints, 'v3', 'adapter_config.json'), 'utf8')).base_model_name_or_path as string;
    const m = await Model.load(base);
    await m.loadAdapter(join(checkpoints, 'v3'));
    expect(m.loraTensors.filter((t) => t.name.includes('lora_B')).some((t) => t.data.some((x) => x !== 0))).toBe(true);
    m.dispose();
  });
});
