// Packing from a prefix tree that is already merged (the Data Pool's claim-check batches): the
// tree's unique nodes are cut into packs under a token budget without ever materialising a
// sample's prompt. Each pack is the union of its samples' root-to-last-output paths, so a node
// shared by samples of one pack is computed once; a shared prefix is repeated only in the packs
// whose samples need it. Cost: O(nodes placed in packs), i.e. O(unique tokens) when the batch fits
// in one pack — never O(sum of prompts).
import type { PrefixTree, PrefixTreeSample } from '@anvil/contracts';
import { buildPack, Pack, PackingError } from './trie';
import type { PackingResult } from './budget';

// The tree layout is the train-batch contract's (libs/contracts codec/prefix-tree-blob.ts): unique
// nodes in DFS pre-order, parents, per-node behaviour logprobs, versions and loss weights, and each
// sample's output nodes.
export type { PrefixTree, PrefixTreeSample };

export interface TreePackingResult extends PackingResult {
  /** For each pack: the tree node each pack node came from (pack node j = tree node nodeOf[p][j]). */
  nodeOf: Int32Array[];
}

/** Checks the tree's invariants (lengths, pre-order parents, sample paths); throws PackingError naming the field. */
export function validatePrefixTree(tree: PrefixTree): void {
  const n = tree.tokens.length;
  if (n === 0) throw new PackingError('prefix tree: tokens is empty');
  for (const [name, arr] of [
    ['parents', tree.parents],
    ['behaviourLogp', tree.behaviourLogp],
    ['versions', tree.versions],
    ['lossWeight', tree.lossWeight],
  ] as const) {
    if (arr.length !== n) throw new PackingError(`prefix tree: ${name} has ${arr.length} entries for ${n} tokens`);
  }
  for (let i = 0; i < n; i++) {
    const p = tree.parents[i];
    if (p < -1 || p >= i) throw new PackingError(`prefix tree: parents[${i}] = ${p} is not -1 or an earlier node (DFS pre-order)`);
    if (tree.tokens[i] < 0) throw new PackingError(`prefix tree: tokens[${i}] = ${tree.tokens[i]} is negative`);
  }
  if (tree.samples.length === 0) throw new PackingError('prefix tree: no samples');
  tree.samples.forEach((s, k) => {
    const o = s.outputNodes;
    if (o.length === 0) throw new PackingError(`prefix tree: samples[${k}] (${s.sampleId}) has no output nodes`);
    if (!Number.isFinite(s.advantage)) throw new PackingError(`prefix tree: samples[${k}].advantage is not finite`);
    if (!(s.lossWeight >= 0) || !Number.isFinite(s.lossWeight))
      throw new PackingError(`prefix tree: samples[${k}].lossWeight must be finite and >= 0`);
    for (let t = 0; t < o.length; t++) {
      if (o[t] < 0 || o[t] >= n) throw new PackingError(`prefix tree: samples[${k}].outputNodes[${t}] = ${o[t]} is outside the tree`);
      if (t > 0 && tree.parents[o[t]] !== o[t - 1])
        throw new PackingError(`prefix tree: samples[${k}].outputNodes[${t}] is not the child of outputNodes[${t - 1}]`);
    }
    if (tree.parents[o[0]] === -1)
      throw new PackingError(`prefix tree: samples[${k}] has an empty prompt (its first output node is a root)`);
  });
}

/** Depth (position id) of every node: roots 0. */
function depths(parents: Int32Array): Int32Array {
  const d = new Int32Array(parents.length);
  for (let i = 0; i < parents.length; i++) d[i] = parents[i] < 0 ? 0 : d[parents[i]] + 1;
  return d;
}

/**
 * Cuts the tree into packs of at most maxTokens nodes. Samples are taken in the order of their
 * last output node (DFS order, so neighbours share the most); a sample joins the current pack
 * when the nodes it adds (its path up to the first node already in the pack) fit, else it opens
 * a new pack. A sample whose own path exceeds the budget is an error.
 */
export function packTree(tree: PrefixTree, opts: { maxTokens: number }): TreePackingResult {
  const budget = opts.maxTokens;
  if (!Number.isInteger(budget) || budget < 1) throw new PackingError(`maxTokens must be a positive integer, got ${budget}`);
  validatePrefixTree(tree);
  const n = tree.tokens.length;
  const depth = depths(tree.parents);
  const order = tree.samples
    .map((_, k) => k)
    .sort((a, b) => {
      const la = tree.samples[a].outputNodes,
        lb = tree.samples[b].outputNodes;
      return la[la.length - 1] - lb[lb.length - 1] || a - b;
    });
  // inPack[i] = index of the last pack that contains node i (+1; 0 = none yet)
  const inPack = new Int32Array(n);
  const bins: { members: number[]; nodes: number[] }[] = [];
  let cur: { members: number[]; nodes: number[] } | null = null;
  const added: number[] = [];
  for (const k of order) {
    const s = tree.samples[k];
    const last = s.outputNodes[s.outputNodes.length - 1];
    const pathLen = depth[last] + 1;
    if (pathLen > budget)
      throw new PackingError(
        `sample ${s.sampleId} has ${pathLen} tokens, more than the pack budget maxTokens = ${budget}; it cannot be packed`,
      );
    const tag = bins.length; // the current pack's tag (= its index + 1)
    added.length = 0;
    if (cur) for (let i = last; i >= 0 && inPack[i] !== tag; i = tree.parents[i]) added.push(i);
    if (!cur || cur.nodes.length + added.length > budget) {
      cur = { members: [], nodes: [] };
      bins.push(cur);
      added.length = 0;
      for (let i = last; i >= 0; i = tree.parents[i]) added.push(i);
    }
    const t = bins.length;
    for (const i of added) {
      inPack[i] = t;
      cur.nodes.push(i);
    }
    cur.members.push(k);
  }
  const packs: Pack[] = [];
  const nodeOf: Int32Array[] = [];
  const locations: PackingResult['locations'] = new Array(tree.samples.length);
  const local = new Int32Array(n).fill(-1);
  bins.forEach((b, pi) => {
    // tree order is pre-order, and a set closed under ancestors keeps pre-order when sorted
    const nodes = Int32Array.from(b.nodes).sort();
    nodes.forEach((g, j) => (local[g] = j));
    const m = nodes.length;
    const tokens = new Int32Array(m);
    const parents = new Int32Array(m);
    const lossWeights = new Float32Array(m);
    for (let j = 0; j < m; j++) {
      const g = nodes[j];
      tokens[j] = tree.tokens[g];
      parents[j] = tree.parents[g] < 0 ? -1 : local[tree.parents[g]];
    }
    const members = [...b.members].sort((x, y) => x - y);
    let total = 0;
    const outputNodes = members.map((k) => {
      const s = tree.samples[k];
      const outs = Int32Array.from(s.outputNodes, (g) => local[g]);
      for (const j of outs) lossWeights[j] += s.lossWeight;
      total += depth[s.outputNodes[s.outputNodes.length - 1]] + 1;
      locations[k] = { pack: pi, outputNodes: outs };
      return outs;
    });
    packs.push({
      tokens,
      parents,
      lossWeights,
      samples: members,
      outputNodes,
      totalTokens: total,
      uniqueTokens: m,
      sharing: total > 0 ? 1 - m / total : 0,
    });
    nodeOf.push(nodes);
    for (const g of nodes) local[g] = -1;
  });
  const totalTokens = packs.reduce((a, p) => a + p.totalTokens, 0);
  const uniqueTokens = packs.reduce((a, p) => a + p.uniqueTokens, 0);
  return { packs, locations, nodeOf, totalTokens, uniqueTokens, sharing: totalTokens > 0 ? 1 - uniqueTokens / totalTokens : 0 };
}

/**
 * The PrefixTree of fully materialised samples (the reference the Data Pool's tree must equal, and
 * the way a trainer given plain samples builds one): merged by trie semantics in DFS pre-order.
 */
export function prefixTreeOf(
  samples: readonly {
    sampleId: string;
    trajectoryId: string;
    groupId: string;
    advantage: number;
    lossWeight: number;
    promptIds: ArrayLike<number>;
    outputIds: ArrayLike<number>;
    behaviourLogp: ArrayLike<number>;
    versions: ArrayLike<number>;
  }[],
): PrefixTree {
  // The trie packer gives the structure; the generation records are attached per node.
  const pack = buildPack(samples.map((s) => ({ promptIds: s.promptIds, outputIds: s.outputIds })));
  const n = pack.tokens.length;
  const behaviourLogp = new Float32Array(n);
  const versions = new Uint32Array(n);
  const treeSamples: PrefixTreeSample[] = samples.map((s, k) => {
    if (s.behaviourLogp.length !== s.outputIds.length || s.versions.length !== s.outputIds.length)
      throw new PackingError(`sample ${k} (${s.sampleId}): behaviourLogp and versions need one entry per output token`);
    const outs = pack.outputNodes[k];
    for (let t = 0; t < outs.length; t++) {
      behaviourLogp[outs[t]] = s.behaviourLogp[t];
      versions[outs[t]] = s.versions[t];
    }
    return {
      sampleId: s.sampleId,
      trajectoryId: s.trajectoryId,
      groupId: s.groupId,
      advantage: s.advantage,
      lossWeight: s.lossWeight,
      outputNodes: outs,
      promptLength: s.promptIds.length,
    };
  });
  const lossWeight = new Float32Array(n);
  treeSamples.forEach((s) => s.outputNodes.forEach((j) => (lossWeight[j] += s.lossWeight)));
  return { tokens: pack.tokens, parents: pack.parents, behaviourLogp, versions, lossWeight, samples: treeSamples };
}
