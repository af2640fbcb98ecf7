import { createHash } from 'node:crypto';
import { ContractError } from '../errors';

/**
 * The token tree of a train batch (DESIGN "Prefix-tree packing"): unique token nodes in DFS
 * pre-order, each with its parent (-1 for a root, parents[i] < i), the behaviour logprob and
 * policy version it was sampled with (0 / 0 for nodes that are only ever prompt tokens), and
 * its loss weight (the summed weight of the samples that have it as an output token). Each
 * sample (one LLM call) names the nodes of its output tokens in order; its prompt is the path
 * from the root to the parent of its first output node.
 */
export interface PrefixTreeSample {
  sampleId: string;
  trajectoryId: string;
  groupId: string;
  advantage: number;
  lossWeight: number;
  /** Node index of each output token, in order. */
  outputNodes: Int32Array;
  promptLength: number;
}

export interface PrefixTree {
  tokens: Int32Array;
  parents: Int32Array;
  behaviourLogp: Float32Array;
  versions: Uint32Array;
  lossWeight: Float32Array;
  samples: PrefixTreeSample[];
}

export const PREFIX_TREE_LAYOUT = 'anvil-prefix-tree/1';

/**
 * Layout 'anvil-prefix-tree/1' is a safetensors file (https://github.com/huggingface/safetensors):
 *
 *   u64 LE    N, the header length
 *   N bytes   UTF-8 JSON header (padded with spaces to a multiple of 8):
 *             { "__metadata__": { "layout": "anvil-prefix-tree/1", "nodes": "<n>", "samples": "<JSON [[sampleId, trajectoryId, groupId], ...]>" },
 *               "<tensor>": { "dtype": "I32" | "U32" | "F32", "shape": [len], "data_offsets": [begin, end] }, ... }
 *   the data  little-endian, tensors back to back in the order below, offsets relative to the data start
 *
 * tensors (n = nodes, S = samples, O = output tokens over all samples):
 *   tokens I32[n], parents I32[n], behaviour_logp F32[n], versions U32[n], loss_weight F32[n],
 *   sample_output_offsets I32[S+1] (sample s owns sample_output_nodes[off[s]:off[s+1]]),
 *   sample_output_nodes I32[O], sample_prompt_length I32[S], sample_advantage F32[S], sample_loss_weight F32[S]
 *
 * Python reads it with `safetensors.numpy.load(blob)`; the checksum is sha256 over the whole blob.
 */
const TENSORS = [
  ['tokens', 'I32'],
  ['parents', 'I32'],
  ['behaviour_logp', 'F32'],
  ['versions', 'U32'],
  ['loss_weight', 'F32'],
  ['sample_output_offsets', 'I32'],
  ['sample_output_nodes', 'I32'],
  ['sample_prompt_length', 'I32'],
  ['sample_advantage', 'F32'],
  ['sample_loss_weight', 'F32'],
] as const;
type TensorName = (typeof TENSORS)[number][0];
type Dt = 'I32' | 'U32' | 'F32';
const CTOR = { I32: Int32Array, U32: Uint32Array, F32: Float32Array } as const;

export class PrefixTreeBlobError extends ContractError {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super('invalid_payload', `${PREFIX_TREE_LAYOUT}: ${field}: ${message}`);
  }
}

/** Structural checks of a tree (pre-order parents, array lengths, sample nodes in range). */
export function validatePrefixTree(t: PrefixTree): void {
  const n = t.tokens.length;
  for (const [name, arr] of [
    ['parents', t.parents],
    ['behaviourLogp', t.behaviourLogp],
    ['versions', t.versions],
    ['lossWeight', t.lossWeight],
  ] as const) {
    if (arr.length !== n) throw new PrefixTreeBlobError(name, `${arr.length} entries for ${n} nodes`);
  }
  for (let i = 0; i < n; i++) {
    const p = t.parents[i];
    if (p < -1 || p >= i) throw new PrefixTreeBlobError(`parents[${i}]`, `${p} is not -1 or an earlier node (DFS pre-order)`);
  }
  t.samples.forEach((s, k) => {
    for (let j = 0; j < s.outputNodes.length; j++) {
      const v = s.outputNodes[j];
      if (v < 0 || v >= n) throw new PrefixTreeBlobError(`samples[${k}].outputNodes[${j}]`, `${v} is not a node index below ${n}`);
    }
    if (!Number.isInteger(s.promptLength) || s.promptLength < 1)
      throw new PrefixTreeBlobError(`samples[${k}].promptLength`, `${s.promptLength} is not a positive integer`);
  });
}

export function encodePrefixTreeBlob(t: PrefixTree): { blob: Buffer; sha256: string } {
  validatePrefixTree(t);
  const S = t.samples.length;
  const offsets = new Int32Array(S + 1);
  t.samples.forEach((s, k) => (offsets[k + 1] = offsets[k] + s.outputNodes.length));
  const outNodes = new Int32Array(offsets[S]);
  t.samples.forEach((s, k) => outNodes.set(s.outputNodes, offsets[k]));
  const data: Record<TensorName, Int32Array | Uint32Array | Float32Array> = {
    tokens: t.tokens,
    parents: t.parents,
    behaviour_logp: t.behaviourLogp,
    versions: t.versions,
    loss_weight: t.lossWeight,
    sample_output_offsets: offsets,
    sample_output_nodes: outNodes,
    sample_prompt_length: Int32Array.from(t.samples, (s) => s.promptLength),
    sample_advantage: Float32Array.from(t.samples, (s) => s.advantage),
    sample_loss_weight: Float32Array.from(t.samples, (s) => s.lossWeight),
  };
  const header: Record<string, unknown> = {
    __metadata__: {
      layout: PREFIX_TREE_LAYOUT,
      nodes: String(t.tokens.length),
      samples: JSON.stringify(t.samples.map((s) => [s.sampleId, s.trajectoryId, s.groupId])),
    },
  };
  let cursor = 0;
  for (const [name, dtype] of TENSORS) {
    const bytes = data[name].byteLength;
    header[name] = { dtype, shape: [data[name].length], data_offsets: [cursor, cursor + bytes] };
    cursor += bytes;
  }
  let json = JSON.stringify(header);
  const raw = Buffer.byteLength(json);
  json += ' '.repeat(((raw + 7) & ~7) - raw);
  const headerBytes = Buffer.from(json, 'utf8');
  const blob = Buffer.allocUnsafe(8 + headerBytes.length + cursor);
  blob.writeBigUInt64LE(BigInt(headerBytes.length), 0);
  headerBytes.copy(blob, 8);
  let at = 8 + headerBytes.length;
  for (const [name] of TENSORS) {
    const arr = data[name];
    // little-endian hosts only (every platform Node supports today)
    Buffer.from(arr.buffer, arr.byteOffset, arr.byteLength).copy(blob, at);
    at += arr.byteLength;
  }
  return { blob, sha256: sha256Hex(blob) };
}

export function sha256Hex(buf: Uint8Array): string {
  return createHash('sha256').update(buf).digest('hex');
}

/** Parses a blob (no checksum check: the caller compares sha256Hex(blob) first). */
export function decodePrefixTreeBlob(blob: Uint8Array): PrefixTree {
  const buf = Buffer.isBuffer(blob) ? blob : Buffer.from(blob.buffer, blob.byteOffset, blob.byteLength);
  if (buf.length < 8) throw new PrefixTreeBlobError('header', `blob of ${buf.length} bytes has no header length`);
  const n = Number(buf.readBigUInt64LE(0));
  if (8 + n > buf.length) throw new PrefixTreeBlobError('header', `header length ${n} exceeds the blob (${buf.length} bytes)`);
  let header: Record<string, { dtype: Dt; shape: number[]; data_offsets: [number, number] }> & { __metadata__?: Record<string, string> };
  try {
    header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  } catch (err) {
    throw new PrefixTreeBlobError('header', `not JSON (${(err as Error).message})`);
  }
  const meta = header.__metadata__;
  if (meta?.layout !== PREFIX_TREE_LAYOUT)
    throw new PrefixTreeBlobError('__metadata__.layout', `expected ${PREFIX_TREE_LAYOUT}, got ${JSON.stringify(meta?.layout)}`);
  const dataStart = 8 + n;
  const get = <D extends Dt>(name: TensorName, dtype: D): InstanceType<(typeof CTOR)[D]> => {
    const e = header[name];
    if (!e || e.dtype !== dtype || !Array.isArray(e.data_offsets)) throw new PrefixTreeBlobError(name, `missing or not ${dtype}`);
    const [b, end] = e.data_offsets;
    if (!(Number.isInteger(b) && Number.isInteger(end) && 0 <= b && b <= end && dataStart + end <= buf.length && (end - b) % 4 === 0)) {
      throw new PrefixTreeBlobError(name, `data_offsets ${JSON.stringify(e.data_offsets)} out of range`);
    }
    const copy = new Uint8Array(end - b);
    copy.set(buf.subarray(dataStart + b, dataStart + end));
    return new CTOR[dtype](copy.buffer) as InstanceType<(typeof CTOR)[D]>;
  };
  let ids: [string, string, string][];
  try {
    ids = JSON.parse(meta.samples ?? '[]');
  } catch {
    throw new PrefixTreeBlobError('__metadata__.samples', 'not JSON');
  }
  const offsets = get('sample_output_offsets', 'I32');
  const outNodes = get('sample_output_nodes', 'I32');
  const promptLen = get('sample_prompt_length', 'I32');
  const adv = get('sample_advantage', 'F32');
  const lw = get('sample_loss_weight', 'F32');
  const S = ids.length;
  if (offsets.length !== S + 1 || promptLen.length !== S || adv.length !== S || lw.length !== S) {
    throw new PrefixTreeBlobError('sample_output_offsets', `sample tensors disagree with ${S} samples in __metadata__.samples`);
  }
  const tree: PrefixTree = {
    tokens: get('tokens', 'I32'),
    parents: get('parents', 'I32'),
    behaviourLogp: get('behaviour_logp', 'F32'),
    versions: get('versions', 'U32'),
    lossWeight: get('loss_weight', 'F32'),
    samples: ids.map(([sampleId, trajectoryId, groupId], k) => {
      if (!(offsets[k] <= offsets[k + 1] && offsets[k + 1] <= outNodes.length))
        throw new PrefixTreeBlobError(`sample_output_offsets[${k}]`, 'not ascending within sample_output_nodes');
      return {
        sampleId,
        trajectoryId,
        groupId,
        advantage: adv[k],
        lossWeight: lw[k],
        outputNodes: outNodes.slice(offsets[k], offsets[k + 1]),
        promptLength: promptLen[k],
      };
    }),
  };
  validatePrefixTree(tree);
  return tree;
}
