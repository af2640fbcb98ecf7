import { describe, expect, it } from 'vitest';
import { decodePrefixTreeBlob, encodePrefixTreeBlob, PrefixTreeBlobError, sha256Hex, type PrefixTree } from './prefix-tree-blob';
import { llmCallV1ToV2, PromptChain, PromptChainError, type LlmCallRecordedV1 } from '../events/llm-call';
import { decodeEvent, encodeEvent, createEventAt } from '../envelope';

const tree = (): PrefixTree => ({
  tokens: Int32Array.of(5, 6, 7, 8, 9),
  parents: Int32Array.of(-1, 0, 1, 1, -1),
  behaviourLogp: Float32Array.of(0, 0, -0.5, -1.25, 0),
  versions: Uint32Array.of(0, 0, 3, 4, 0),
  lossWeight: Float32Array.of(0, 0, 1, 0, 0),
  samples: [
    { sampleId: 'a', trajectoryId: 't1', groupId: 'g', advantage: 0.5, lossWeight: 1, outputNodes: Int32Array.of(2), promptLength: 2 },
    { sampleId: 'b', trajectoryId: 't2', groupId: 'g', advantage: -0.5, lossWeight: 0, outputNodes: Int32Array.of(3), promptLength: 2 },
  ],
});

describe("layout 'anvil-prefix-tree/1'", () => {
  it('round-trips bit-exactly and is a valid safetensors file (u64 header length, JSON header, contiguous offsets)', () => {
    const { blob, sha256 } = encodePrefixTreeBlob(tree());
    expect(sha256).toBe(sha256Hex(blob));
    const n = Number(blob.readBigUInt64LE(0));
    expect(n % 8).toBe(0);
    const header = JSON.parse(blob.subarray(8, 8 + n).toString());
    expect(header.__metadata__.layout).toBe('anvil-prefix-tree/1');
    expect(header.tokens).toEqual({ dtype: 'I32', shape: [5], data_offsets: [0, 20] });
    expect(header.sample_output_offsets).toEqual({ dtype: 'I32', shape: [3], data_offsets: [100, 112] });
    expect(blob.length).toBe(8 + n + header.sample_loss_weight.data_offsets[1]);
    expect(Array.from(new Int32Array(blob.buffer.slice(blob.byteOffset + 8 + n + 20, blob.byteOffset + 8 + n + 40)))).toEqual([
      -1, 0, 1, 1, -1,
    ]);
    expect(decodePrefixTreeBlob(blob)).toEqual(tree());
  });

  it('refuses a tree that is not in pre-order, naming the field', () => {
    const t = tree();
    t.parents[2] = 3;
    expect(() => encodePrefixTreeBlob(t)).toThrow(PrefixTreeBlobError);
    expect(() => encodePrefixTreeBlob(t)).toThrow(/parents\[2\]/);
  });

  it('refuses a truncated or foreign blob', () => {
    const { blob } = encodePrefixTreeBlob(tree());
    expect(() => decodePrefixTreeBlob(blob.subarray(0, 40))).toThrow(/header/);
    const other = Buffer.from(blob);
    other.write('XXXXX-prefix-tree/1', other.indexOf('anvil-prefix-tree/1'));
    expect(() => decodePrefixTreeBlob(other)).toThrow(/layout/);
  });
});

const now = 1_700_000_000_000;
const v1 = (callId: string, parentCallId: string | null, promptIds: number[], reused: number, outputIds: number[]): LlmCallRecordedV1 => ({
  callId,
  sessionId: 's',
  rolloutId: 'r',
  groupId: 'g',
  taskId: 't',
  branchId: 'b',
  parentCallId,
  turnIndex: 0,
  model: 'm',
  promptIds: Int32Array.from(promptIds),
  reusedPromptTokens: reused,
  outputIds: Int32Array.from(outputIds),
  outputLogprobs: new Float32Array(outputIds.length),
  outputVersions: new Uint32Array(outputIds.length),
  finishReason: 'stop',
  sampling: { temperature: 1, topP: 1, topK: 0, seed: null },
  timings: { receivedAt: now, firstTokenAt: null, finishedAt: now },
});

describe('llm_call.recorded v2 (prompt deltas)', () => {
  it('carries only the ids after the reused prefix, and PromptChain rebuilds the whole prompt', () => {
    const c1 = v1('c1', null, [1, 2, 3], 0, [4, 5]);
    const c2 = v1('c2', 'c1', [1, 2, 3, 4, 5, 6, 7], 5, [8]);
    const c3 = v1('c3', 'c2', [1, 2, 3, 4, 9], 4, [10]); // reuses only a prefix of the parent's sequence
    const d = [c1, c2, c3].map(llmCallV1ToV2);
    expect(d.map((x) => [Array.from(x.promptDeltaIds), x.promptLength])).toEqual([
      [[1, 2, 3], 3],
      [[6, 7], 7],
      [[9], 5],
    ]);
    const chain = new PromptChain();
    expect(d.map((x) => Array.from(chain.fullPrompt(x)))).toEqual([c1, c2, c3].map((x) => Array.from(x.promptIds)));
    expect(() => new PromptChain().fullPrompt(d[1])).toThrow(PromptChainError);
  });

  it('refuses a v2 whose promptLength disagrees with its delta, naming the field; v1 still decodes', () => {
    const p = { ...llmCallV1ToV2(v1('c2', 'c1', [1, 2, 3, 4], 2, [5])), promptLength: 5 };
    expect(() => encodeEvent(createEventAt('llm_call.recorded', 2, p, { key: 'r', producer: 't' }))).toThrow(/payload\.promptLength/);
    const old = createEventAt('llm_call.recorded', 1, v1('c1', null, [1, 2], 0, [3]), { key: 'r', producer: 't' });
    const back = decodeEvent(encodeEvent(old));
    expect(back.version).toBe(1);
    expect(Array.from((back.payload as unknown as LlmCallRecordedV1).promptIds)).toEqual([1, 2]);
  });
});
