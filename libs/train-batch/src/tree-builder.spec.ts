import { describe, expect, it } from 'vitest';
import { buildPack } from '@anvil/rl';
import { PromptChain, llmCallV1ToV2, type LlmCallRecordedV1 } from '@anvil/contracts';
import { PrefixTreeBuilder, TreeBuildError, type CallSegment } from './tree-builder';

/** xorshift32 */
function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 0x1_0000_0000;
  };
}

interface Full {
  call: CallSegment;
  prompt: Int32Array;
  trajectoryId: string;
  weight: number;
}

/**
 * A group of trajectories: a shared system+task prefix, each rollout's calls extending the previous
 * call (prompt + output + new tokens), sometimes reusing only part of the parent (a rewritten
 * tail), sometimes starting a new branch (context rewrite) from a summary prompt.
 */
function group(seed: number, rollouts: number, calls: number): Full[] {
  const r = rng(seed);
  const tok = () => Math.floor(r() * 50);
  const shared = Array.from({ length: 20 }, tok);
  const out: Full[] = [];
  for (let t = 0; t < rollouts; t++) {
    let prev: { id: string; seq: number[] } | null = null;
    for (let c = 0; c < calls; c++) {
      const id = `t${t}-c${c}`;
      let prompt: number[];
      let reused = 0;
      let parent: string | null = null;
      if (prev && r() > 0.15) {
        reused = r() < 0.2 ? Math.max(1, prev.seq.length - 3) : prev.seq.length;
        prompt = [...prev.seq.slice(0, reused), ...Array.from({ length: 1 + Math.floor(r() * 6) }, tok)];
        parent = prev.id;
      } else {
        prompt = [...shared, ...Array.from({ length: Math.floor(r() * 4) }, tok)];
      }
      const outputIds = Array.from({ length: 1 + Math.floor(r() * 5) }, tok);
      const v1: LlmCallRecordedV1 = {
        callId: id,
        sessionId: 's',
        rolloutId: `t${t}`,
        groupId: 'g',
        taskId: 'x',
        branchId: 'b',
        parentCallId: parent,
        turnIndex: c,
        model: 'm',
        promptIds: Int32Array.from(prompt),
        reusedPromptTokens: reused,
        outputIds: Int32Array.from(outputIds),
        outputLogprobs: Float32Array.from(outputIds, () => -r()),
        outputVersions: Uint32Array.from(outputIds, () => 1 + Math.floor(r() * 3)),
        finishReason: 'stop',
        sampling: { temperature: 1, topP: 1, topK: 0, seed: null },
        timings: { receivedAt: 0, firstTokenAt: null, finishedAt: 0 },
      };
      const v2 = llmCallV1ToV2(v1);
      out.push({ call: { ...v2, callId: id }, prompt: v1.promptIds, trajectoryId: `t${t}`, weight: t % 3 === 2 ? 0 : 1 });
      prev = { id, seq: [...prompt, ...outputIds] };
    }
  }
  return out;
}

describe('PrefixTreeBuilder (from call deltas) equals buildPack over the materialised samples', () => {
  it.each([1, 2, 3, 4, 5])('seed %i: same nodes, pre-order, loss weights and output nodes', (seed) => {
    const calls = group(seed, 4, 12);
    const b = new PrefixTreeBuilder();
    for (const f of calls)
      b.add(f.call, { sampleId: f.call.callId, trajectoryId: f.trajectoryId, groupId: 'g', advantage: 0.5, lossWeight: f.weight });
    const tree = b.build();
    const chain = new PromptChain();
    const prompts = calls.map((f) =>
      chain.fullPrompt({ ...(f.call as unknown as Parameters<PromptChain['fullPrompt']>[0]), promptLength: f.prompt.length } as never),
    );
    expect(prompts.map((p) => Array.from(p))).toEqual(calls.map((f) => Array.from(f.prompt)));
    const pack = buildPack(
      calls.map((f) => ({
        promptIds: f.prompt,
        outputIds: f.call.outputIds,
        weights: new Float32Array(f.call.outputIds.length).fill(f.weight),
      })),
    );
    expect(Array.from(tree.tokens)).toEqual(Array.from(pack.tokens));
    expect(Array.from(tree.parents)).toEqual(Array.from(pack.parents));
    expect(Array.from(tree.lossWeight)).toEqual(Array.from(pack.lossWeights));
    expect(tree.samples.map((s) => Array.from(s.outputNodes))).toEqual(pack.outputNodes.map((o) => Array.from(o)));
    expect(tree.samples.map((s) => s.promptLength)).toEqual(calls.map((f) => f.prompt.length));
    // behaviour logprobs / versions sit on the output nodes of the samples that produced them
    calls.forEach((f, i) => {
      const first = tree.samples.findIndex((s) => s.outputNodes.some((n) => tree.samples[i].outputNodes.includes(n)));
      if (first === i)
        tree.samples[i].outputNodes.forEach((n, k) => {
          expect(tree.behaviourLogp[n]).toBeCloseTo(f.call.outputLogprobs[k], 6);
          expect(tree.versions[n]).toBe(f.call.outputVersions[k]);
        });
    });
    expect(b.total).toBe(pack.totalTokens);
    expect(tree.tokens.length).toBeLessThan(pack.totalTokens);
  });

  it('refuses a call whose parent was not added, naming the field', () => {
    const b = new PrefixTreeBuilder();
    const seg: CallSegment = {
      callId: 'c2',
      parentCallId: 'c1',
      reusedPromptTokens: 3,
      promptDeltaIds: Int32Array.of(1),
      outputIds: Int32Array.of(2),
      outputLogprobs: Float32Array.of(-1),
      outputVersions: Uint32Array.of(1),
    };
    expect(() => b.add(seg, null)).toThrow(TreeBuildError);
    expect(() => b.add(seg, null)).toThrow(/parentCallId/);
  });
});
