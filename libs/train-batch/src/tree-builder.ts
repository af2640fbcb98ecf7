import type { PrefixTree, PrefixTreeSample } from '@anvil/contracts';

/** One LLM call as the Data Pool stores it: a delta of its parent call. */
export interface CallSegment {
  callId: string;
  parentCallId: string | null;
  /** Leading prompt ids that are the parent's prompt + output ids (a prefix of them). */
  reusedPromptTokens: number;
  /** The prompt ids after that prefix. */
  promptDeltaIds: Int32Array;
  outputIds: Int32Array;
  outputLogprobs: Float32Array;
  outputVersions: Uint32Array;
}

export type SampleMeta = Omit<PrefixTreeSample, 'outputNodes' | 'promptLength'>;

export class TreeBuildError extends Error {
  override name = 'TreeBuildError';
  constructor(
    readonly callId: string,
    readonly field: string,
    message: string,
  ) {
    super(`call ${callId}: ${field}: ${message}`);
  }
}

interface Placed {
  parent: Placed | null;
  reused: number;
  /** Trie node (insertion id) of each token of this call's own segment (delta prompt, then output). */
  nodes: Int32Array;
  length: number;
}

/**
 * Builds the prefix tree (trie, DFS pre-order) of a batch's samples straight from the calls'
 * deltas, without materialising any prompt: each call inserts only its own segment (the prompt
 * after the reused prefix and its output) starting at the node of its parent's sequence it
 * extends, so the work is linear in the tokens the calls store. Adding the calls in the order of
 * the samples (parents before children) gives exactly the tree libs/rl `buildPack` builds from
 * the fully materialised samples in that order (same nodes, same pre-order, same output nodes).
 */
export class PrefixTreeBuilder {
  private readonly tokens: number[] = [];
  private readonly parentOf: number[] = [];
  private readonly children: Array<Map<number, number> | undefined> = [];
  private readonly roots = new Map<number, number>();
  private readonly logp: number[] = [];
  private readonly version: number[] = [];
  private readonly weight: number[] = [];
  private readonly hasOutput: boolean[] = [];
  private readonly placed = new Map<string, Placed>();
  private readonly samples: { meta: SampleMeta; outputs: Int32Array; promptLength: number }[] = [];
  private totalTokens = 0;

  /** Calls added so far (unique tokens: `nodes`). */
  get nodes(): number {
    return this.tokens.length;
  }

  get total(): number {
    return this.totalTokens;
  }

  has(callId: string): boolean {
    return this.placed.has(callId);
  }

  /** Node (insertion id) at position q of a placed call's sequence (prompt + output). */
  private nodeAt(call: Placed, q: number): number {
    let c: Placed | null = call;
    while (c && q < c.reused) c = c.parent;
    if (!c) throw new Error('unreachable: reused prefix beyond the root');
    return c.nodes[q - c.reused];
  }

  private child(parent: number, token: number): number {
    const level = parent < 0 ? this.roots : (this.children[parent] ??= new Map());
    let n = level.get(token);
    if (n === undefined) {
      n = this.tokens.length;
      this.tokens.push(token);
      this.parentOf.push(parent);
      this.children.push(undefined);
      this.logp.push(0);
      this.version.push(0);
      this.weight.push(0);
      this.hasOutput.push(false);
      level.set(token, n);
    }
    return n;
  }

  /** Adds a call as a sample (parents first; a parent must be added, as a sample or with `context`). */
  add(call: CallSegment, sample: SampleMeta | null): void {
    if (this.placed.has(call.callId)) throw new TreeBuildError(call.callId, 'callId', 'added twice');
    const n = call.outputIds.length;
    if (call.outputLogprobs.length !== n || call.outputVersions.length !== n)
      throw new TreeBuildError(call.callId, 'outputLogprobs', 'outputIds, outputLogprobs and outputVersions differ in length');
    let parent: Placed | null = null;
    if (call.reusedPromptTokens > 0) {
      parent = call.parentCallId === null ? null : (this.placed.get(call.parentCallId) ?? null);
      if (!parent)
        throw new TreeBuildError(call.callId, 'parentCallId', `parent ${String(call.parentCallId)} is not in the tree (add parents first)`);
      if (call.reusedPromptTokens > parent.length)
        throw new TreeBuildError(
          call.callId,
          'reusedPromptTokens',
          `${call.reusedPromptTokens} exceeds the parent's ${parent.length} tokens`,
        );
    }
    const reused = parent ? call.reusedPromptTokens : 0;
    const promptLength = reused + call.promptDeltaIds.length;
    if (sample && promptLength === 0) throw new TreeBuildError(call.callId, 'promptDeltaIds', 'empty prompt');
    let at = reused > 0 && parent ? this.nodeAt(parent, reused - 1) : -1;
    const seg = new Int32Array(call.promptDeltaIds.length + n);
    for (let i = 0; i < call.promptDeltaIds.length; i++) seg[i] = at = this.child(at, call.promptDeltaIds[i]);
    const outputs = new Int32Array(n);
    for (let k = 0; k < n; k++) {
      at = this.child(at, call.outputIds[k]);
      seg[call.promptDeltaIds.length + k] = at;
      outputs[k] = at;
      if (sample) {
        if (!this.hasOutput[at]) {
          this.hasOutput[at] = true;
          this.logp[at] = call.outputLogprobs[k];
          this.version[at] = call.outputVersions[k];
        }
        this.weight[at] += sample.lossWeight;
      }
    }
    this.placed.set(call.callId, { parent, reused, nodes: seg, length: promptLength + n });
    if (sample) {
      this.samples.push({ meta: sample, outputs, promptLength });
      this.totalTokens += promptLength + n;
    }
  }

  /** The tree in DFS pre-order (roots and children in first-insertion order, as buildPack). */
  build(): PrefixTree {
    const count = this.tokens.length;
    const pre = new Int32Array(count).fill(-1);
    const order: number[] = [];
    const stack: number[] = [];
    const rootList = [...this.roots.values()];
    for (let r = rootList.length - 1; r >= 0; r--) stack.push(rootList[r]);
    while (stack.length) {
      const node = stack.pop() as number;
      pre[node] = order.length;
      order.push(node);
      const kids = this.children[node];
      if (kids) {
        const list = [...kids.values()];
        for (let c = list.length - 1; c >= 0; c--) stack.push(list[c]);
      }
    }
    const tokens = new Int32Array(count);
    const parents = new Int32Array(count);
    const behaviourLogp = new Float32Array(count);
    const versions = new Uint32Array(count);
    const lossWeight = new Float32Array(count);
    for (let i = 0; i < count; i++) {
      const node = order[i];
      tokens[i] = this.tokens[node];
      const p = this.parentOf[node];
      parents[i] = p < 0 ? -1 : pre[p];
      behaviourLogp[i] = this.logp[node];
      versions[i] = this.version[node];
      lossWeight[i] = this.weight[node];
    }
    return {
      tokens,
      parents,
      behaviourLogp,
      versions,
      lossWeight,
      samples: this.samples.map((s) => ({ ...s.meta, outputNodes: s.outputs.map((n) => pre[n]), promptLength: s.promptLength })),
    };
  }
}
