// Prefix-tree (trie) packing of training samples: samples that share a prefix share its nodes,
// so every shared token is computed once by the engine. Two samples share a node only if their
// WHOLE prefix up to and including that token is identical (trie semantics).

/** One training sample: the prompt (context, no loss) and the output tokens (with loss). */
export interface PackSample {
  promptIds: ArrayLike<number>;
  outputIds: ArrayLike<number>;
  /** Loss weight of each output token (default 1). Prompt tokens always weigh 0. */
  weights?: ArrayLike<number>;
}

/** A packed forest in DFS pre-order: parents[i] < i, -1 for roots. */
export interface Pack {
  tokens: Int32Array;
  parents: Int32Array;
  /** Per node: sum of the loss weights of the samples for which this node is an output token. */
  lossWeights: Float32Array;
  /** Indices (into the packer's input) of the samples in this pack, ascending. */
  samples: number[];
  /** For samples[k]: the node index of each of its output tokens, in order. */
  outputNodes: Int32Array[];
  /** Sum of the samples' lengths (prompt + output). */
  totalTokens: number;
  /** Nodes in the pack. */
  uniqueTokens: number;
  /** 1 - unique / total. */
  sharing: number;
}

export class PackingError extends Error {
  override name = 'PackingError';
}

interface TrieNode {
  token: number;
  children: Map<number, TrieNode>;
  weight: number;
  index: number;
}

function checkSample(s: PackSample, i: number): void {
  const check = (ids: ArrayLike<number>, what: string) => {
    for (let k = 0; k < ids.length; k++) {
      const t = ids[k];
      if (!Number.isInteger(t) || t < 0 || t > 0x7fffffff)
        throw new PackingError(`sample ${i}: ${what}[${k}] = ${t} is not a non-negative int32 token id`);
    }
  };
  if (!s || s.promptIds === undefined || s.outputIds === undefined)
    throw new PackingError(`sample ${i}: promptIds and outputIds are required`);
  check(s.promptIds, 'promptIds');
  check(s.outputIds, 'outputIds');
  if (s.promptIds.length === 0)
    throw new PackingError(`sample ${i}: empty prompt; the first output token would have no context to be predicted from`);
  if (s.weights !== undefined) {
    if (s.weights.length !== s.outputIds.length)
      throw new PackingError(`sample ${i}: weights has ${s.weights.length} entries for ${s.outputIds.length} output tokens`);
    for (let k = 0; k < s.weights.length; k++)
      if (!Number.isFinite(s.weights[k])) throw new PackingError(`sample ${i}: weights[${k}] is not finite`);
  }
}

export function sampleLength(s: PackSample): number {
  return s.promptIds.length + s.outputIds.length;
}

function tokenAt(s: PackSample, k: number): number {
  const p = s.promptIds.length;
  return k < p ? s.promptIds[k] : s.outputIds[k - p];
}

/** Merges the given samples (all of them, no budget) into one pack. */
export function buildPack(samples: readonly PackSample[], indices?: readonly number[]): Pack {
  const idx = indices ? [...indices].sort((a, b) => a - b) : samples.map((_, i) => i);
  if (idx.length === 0) throw new PackingError('no samples to pack');
  const roots = new Map<number, TrieNode>();
  const outNodes: TrieNode[][] = [];
  let total = 0;
  for (const i of idx) {
    const s = samples[i];
    checkSample(s, i);
    const len = sampleLength(s);
    total += len;
    const p = s.promptIds.length;
    const outs: TrieNode[] = [];
    let level = roots;
    for (let k = 0; k < len; k++) {
      const t = tokenAt(s, k);
      let node = level.get(t);
      if (!node) {
        node = { token: t, children: new Map(), weight: 0, index: -1 };
        level.set(t, node);
      }
      if (k >= p) {
        node.weight += s.weights ? s.weights[k - p] : 1;
        outs.push(node);
      }
      level = node.children;
    }
    outNodes.push(outs);
  }
  // DFS pre-order (iterative: trajectories can be 100k+ tokens deep)
  const order: Array<[TrieNode, number]> = [];
  const stack: Array<[TrieNode, number]> = [];
  const rootList = [...roots.values()];
  for (let r = rootList.length - 1; r >= 0; r--) stack.push([rootList[r], -1]);
  for (let top = stack.pop(); top !== undefined; top = stack.pop()) {
    const [node, parent] = top;
    node.index = order.length;
    order.push([node, parent]);
    const kids = [...node.children.values()];
    for (let c = kids.length - 1; c >= 0; c--) stack.push([kids[c], node.index]);
  }
  const n = order.length;
  const tokens = new Int32Array(n);
  const parents = new Int32Array(n);
  const lossWeights = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const [node, parent] = order[i];
    tokens[i] = node.token;
    parents[i] = parent;
    lossWeights[i] = node.weight;
  }
  return {
    tokens,
    parents,
    lossWeights,
    samples: idx,
    outputNodes: outNodes.map((o) => Int32Array.from(o, (nd) => nd.index)),
    totalTokens: total,
    uniqueTokens: n,
    sharing: total > 0 ? 1 - n / total : 0,
  };
}

/** Each sample as its own root chain (unmerged training): the reference that merging must equal. */
export function flatPack(samples: readonly PackSample[], indices?: readonly number[]): Pack {
  const idx = indices ? [...indices].sort((a, b) => a - b) : samples.map((_, i) => i);
  if (idx.length === 0) throw new PackingError('no samples to pack');
  let total = 0;
  for (const i of idx) {
    checkSample(samples[i], i);
    total += sampleLength(samples[i]);
  }
  const tokens = new Int32Array(total);
  const parents = new Int32Array(total);
  const lossWeights = new Float32Array(total);
  const outputNodes: Int32Array[] = [];
  let off = 0;
  for (const i of idx) {
    const s = samples[i];
    const len = sampleLength(s);
    const p = s.promptIds.length;
    const outs = new Int32Array(s.outputIds.length);
    for (let k = 0; k < len; k++) {
      tokens[off + k] = tokenAt(s, k);
      parents[off + k] = k === 0 ? -1 : off + k - 1;
      if (k >= p) {
        lossWeights[off + k] = s.weights ? s.weights[k - p] : 1;
        outs[k - p] = off + k;
      }
    }
    outputNodes.push(outs);
    off += len;
  }
  return { tokens, parents, lossWeights, samples: idx, outputNodes, totalTokens: total, uniqueTokens: total, sharing: 0 };
}

/** Per-node values (e.g. engine log-probs) -> per-sample arrays over each sample's output tokens. */
export function unmergeNodeValues(pack: Pack, nodeValues: ArrayLike<number>): Float32Array[] {
  if (nodeValues.length !== pack.uniqueTokens)
    throw new PackingError(`unmerge: ${nodeValues.length} values for a pack of ${pack.uniqueTokens} nodes`);
  return pack.outputNodes.map((nodes) => Float32Array.from(nodes, (j) => nodeValues[j]));
}

/**
 * Per-sample, per-output-token coefficients (e.g. dLoss/dlogp computed per sample exactly as in
 * unmerged training) -> per-node coefficients: a node shared by m samples gets the sum of theirs.
 * perSample[k] belongs to pack.samples[k].
 */
export function mergeSampleValues(pack: Pack, perSample: readonly ArrayLike<number>[]): Float32Array {
  if (perSample.length !== pack.outputNodes.length)
    throw new PackingError(`merge: ${perSample.length} samples given, the pack has ${pack.outputNodes.length}`);
  const out = new Float32Array(pack.uniqueTokens);
  // accumulate in double, round once
  const acc = new Float64Array(pack.uniqueTokens);
  pack.outputNodes.forEach((nodes, k) => {
    const v = perSample[k];
    if (v.length !== nodes.length)
      throw new PackingError(`merge: sample ${pack.samples[k]} has ${nodes.length} output tokens but ${v.length} values`);
    for (let t = 0; t < nodes.length; t++) acc[nodes[t]] += v[t];
  });
  for (let i = 0; i < out.length; i++) out[i] = acc[i];
  return out;
}
