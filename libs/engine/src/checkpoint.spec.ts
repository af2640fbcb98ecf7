// Save/load: bit-exact round trips (single file and sharded), f16/bf16 conversion on load,
// strict safetensors header validation.
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Model, parseSafetensors, writeSafetensors } from './index';
import { rng } from './test-support';

const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'anvil-ckpt-'));
  dirs.push(d);
  return d;
};
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const bytesOf = (a: Float32Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
const cfg = { vocabSize: 40, hiddenSize: 16, intermediateSize: 24, numHiddenLayers: 2, numAttentionHeads: 2, numKeyValueHeads: 1 };

function expectSameWeights(a: Model, b: Model) {
  expect(b.tensors.map((t) => t.name)).toEqual(a.tensors.map((t) => t.name));
  for (const t of a.tensors) expect(Buffer.compare(bytesOf(t.data), bytesOf(b.tensor(t.name).data)), t.name).toBe(0);
}

/** float -> IEEE half bits, for values exactly representable in f16 (what this test writes). */
function toHalfBits(x: number): number {
  if (x === 0) return Object.is(x, -0) ? 0x8000 : 0;
  const s = x < 0 ? 0x8000 : 0;
  const a = Math.abs(x);
  let e = Math.floor(Math.log2(a));
  if (e < -14) return s | Math.round(a / 2 ** -24); // subnormal
  let m = a / 2 ** e - 1;
  if (m >= 1) {
    m -= 1;
    e += 1;
  } // guard log2 rounding
  return s | ((e + 15) << 10) | Math.round(m * 1024);
}

describe('checkpoints', () => {
  it('save -> load is bit-exact (llama untied + rope scaling) and keeps config fields', async () => {
    const m = Model.create(
      { ...cfg, ropeScaling: { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 64 } },
      { seed: 9 },
    );
    m.tensor('model.norm.weight').data[3] = -0; // odd values survive too
    m.tensor('model.norm.weight').data[4] = 1e-40; // subnormal
    const d = tmp();
    await m.save(d);
    const json = JSON.parse(readFileSync(join(d, 'config.json'), 'utf8'));
    expect(json.architectures).toEqual(['LlamaForCausalLM']);
    expect(json.rope_scaling.rope_type).toBe('llama3');
    const l = await Model.load(d);
    expect(l.config).toEqual(m.config);
    expectSameWeights(m, l);
    // and its outputs are identical
    const pack = { tokens: new Int32Array([1, 2, 3, 4]), parents: new Int32Array([-1, 0, 1, 1]) };
    const [fa, fb] = [await m.forward(pack), await l.forward(pack)];
    expect(Array.from(fb.logp)).toEqual(Array.from(fa.logp));
  });

  it('qwen2 tied round trip writes no lm_head and keeps unknown config keys', async () => {
    const m = Model.create({ ...cfg, modelType: 'qwen2', tieWordEmbeddings: true }, { seed: 2 });
    const d = tmp();
    await m.save(d);
    const st = parseSafetensors(readFileSync(join(d, 'model.safetensors')));
    expect(st.tensors.has('lm_head.weight')).toBe(false);
    expect(st.tensors.has('model.layers.1.self_attn.v_proj.bias')).toBe(true);
    const cfgJson = JSON.parse(readFileSync(join(d, 'config.json'), 'utf8'));
    cfgJson.my_custom_key = 'kept';
    writeFileSync(join(d, 'config.json'), JSON.stringify(cfgJson));
    const l = await Model.load(d);
    expectSameWeights(m, l);
    const d2 = tmp();
    await l.save(d2);
    expect(JSON.parse(readFileSync(join(d2, 'config.json'), 'utf8')).my_custom_key).toBe('kept');
  });

  it('sharded checkpoints (model.safetensors.index.json) save and load bit-exactly', async () => {
    const m = Model.create(cfg, { seed: 3 });
    const d = tmp();
    await m.save(d, { maxShardBytes: 8 * 1024 });
    const files = readdirSync(d).filter((f) => f.endsWith('.safetensors'));
    expect(files.length).toBeGreaterThan(2);
    const index = JSON.parse(readFileSync(join(d, 'model.safetensors.index.json'), 'utf8'));
    expect(Object.keys(index.weight_map).length).toBe(m.tensors.length);
    expectSameWeights(m, await Model.load(d));
    // a shard listed in the index but holding a tensor the index assigns elsewhere is rejected
    index.weight_map['model.norm.weight'] = files[0] === index.weight_map['model.norm.weight'] ? files[1] : files[0];
    writeFileSync(join(d, 'model.safetensors.index.json'), JSON.stringify(index));
    await expect(Model.load(d)).rejects.toThrow(/not listed for this shard/);
    index.weight_map['model.norm.weight'] = '../evil.safetensors';
    writeFileSync(join(d, 'model.safetensors.index.json'), JSON.stringify(index));
    await expect(Model.load(d)).rejects.toThrow(/plain file name/);
  });

  it('loads bf16 and f16 checkpoints, converting exactly', async () => {
    const r = rng(4);
    const m = Model.create(cfg, { seed: 4 });
    const names = m.tensors.map((t) => t.name);
    const expected = new Map<string, Float32Array>();
    const tensors = m.tensors.map((t, k) => {
      const bf16 = k % 2 === 0; // alternate dtypes within one file
      const vals = new Float32Array(t.numel);
      const raw = new Uint8Array(t.numel * 2);
      const dv = new DataView(raw.buffer);
      for (let i = 0; i < t.numel; i++) {
        if (bf16) {
          // any float32 with the low 16 bits cleared is exactly a bf16
          const f = new Float32Array([(r() - 0.5) * 2 ** Math.floor(r() * 20 - 10)]);
          const u = new Uint32Array(f.buffer);
          u[0] &= 0xffff0000;
          vals[i] = f[0];
          dv.setUint16(2 * i, u[0] >>> 16, true);
        } else {
          // multiples of 2^-8 in [-4, 4] (f16 spacing there is at most 2^-9) plus edge values are exact in f16
          const v = i === 0 ? 65504 : i === 1 ? 2 ** -24 : i === 2 ? -(2 ** -14) : Math.round((r() - 0.5) * 8 * 256) / 256;
          vals[i] = v;
          dv.setUint16(2 * i, toHalfBits(v), true);
        }
      }
      expected.set(t.name, vals);
      return { name: t.name, shape: t.shape, dtype: (bf16 ? 'BF16' : 'F16') as 'BF16' | 'F16', data: raw };
    });
    const d = tmp();
    await m.save(d); // for config.json
    await writeSafetensors(join(d, 'model.safetensors'), tensors);
    const l = await Model.load(d);
    for (const n of names) expect(Array.from(l.tensor(n).data), n).toEqual(Array.from(expected.get(n)!));
    // f16 edge values: max normal, smallest subnormal, smallest normal (negative)
    const f16 = l.tensor(names[1]).data;
    expect([f16[0], f16[1], f16[2]]).toEqual([65504, 2 ** -24, -(2 ** -14)]);
  });

  describe('strict safetensors validation', () => {
    const make = (header: object, dataLen: number) => {
      const json = Buffer.from(JSON.stringify(header));
      const len = Buffer.alloc(8);
      len.writeBigUInt64LE(BigInt(json.length));
      return Buffer.concat([len, json, Buffer.alloc(dataLen)]);
    };
    const cases: Array<[string, Buffer, RegExp]> = [
      ['too short', Buffer.alloc(4), /too short/],
      [
        'header length beyond the file',
        (() => {
          const b = Buffer.alloc(16);
          b.writeBigUInt64LE(1000n);
          return b;
        })(),
        /header length/,
      ],
      [
        'bad JSON',
        (() => {
          const b = Buffer.alloc(12);
          b.writeBigUInt64LE(4n);
          b.write('{{{{', 8);
          return b;
        })(),
        /not valid JSON/,
      ],
      ['unknown dtype', make({ a: { dtype: 'F128', shape: [1], data_offsets: [0, 16] } }, 16), /unknown dtype/],
      ['negative shape', make({ a: { dtype: 'F32', shape: [-1], data_offsets: [0, 4] } }, 4), /shape must be/],
      ['offsets out of bounds', make({ a: { dtype: 'F32', shape: [4], data_offsets: [0, 16] } }, 8), /out of bounds/],
      ['size does not match shape', make({ a: { dtype: 'F32', shape: [3], data_offsets: [0, 16] } }, 16), /expected 12/],
      [
        'overlap',
        make({ a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] }, b: { dtype: 'F32', shape: [2], data_offsets: [4, 12] } }, 12),
        /gap or overlap/,
      ],
      ['gap', make({ a: { dtype: 'F32', shape: [1], data_offsets: [4, 8] } }, 8), /gap or overlap/],
      ['trailing bytes', make({ a: { dtype: 'F32', shape: [1], data_offsets: [0, 4] } }, 8), /cover 4 bytes/],
      ['bad offsets type', make({ a: { dtype: 'F32', shape: [1], data_offsets: [0] } }, 4), /data_offsets must be/],
    ];
    for (const [label, buf, re] of cases) it(label, () => expect(() => parseSafetensors(buf)).toThrow(re));

    it('wrong tensor shape, missing tensor and unsupported dtype are load errors', async () => {
      const m = Model.create(cfg, { seed: 5 });
      const base = tmp();
      await m.save(base);
      const file = join(base, 'model.safetensors');
      const good = m.tensors.map((t) => ({ name: t.name, shape: t.shape, dtype: 'F32' as const, data: t.data }));
      await writeSafetensors(
        file,
        good.map((t) => (t.name === 'model.norm.weight' ? { ...t, shape: [4, 4] } : t)),
      );
      await expect(Model.load(base)).rejects.toThrow(/model.norm.weight has shape \[4, 4\], expected \[16\]/);
      await writeSafetensors(
        file,
        good.filter((t) => t.name !== 'lm_head.weight'),
      );
      await expect(Model.load(base)).rejects.toThrow(/missing tensors: lm_head.weight/);
      await writeSafetensors(file, [...good, { name: 'model.extra.weight', shape: [1], dtype: 'F32', data: new Float32Array(1) }]);
      await expect(Model.load(base)).rejects.toThrow(/unexpected tensor model.extra.weight/);
      writeFileSync(join(base, 'config.json'), JSON.stringify({ model_type: 'gpt2' }));
      await expect(Model.load(base)).rejects.toThrow(/model_type must be "llama" or "qwen2"/);
    });
  });
});
