// LoRA adapters on disk: PEFT's file layout and key names, a bit-exact round trip, a resume that
// continues exactly where the uninterrupted run goes, and adapters that must be refused (another
// base, another shape, a damaged or foreign file) without changing the model.
import { mkdtempSync, promises as fsp } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  ADAPTER_CONFIG_FILE,
  ADAPTER_OPTIMIZER_FILE,
  ADAPTER_WEIGHTS_FILE,
  LoraAdapterError,
  Model,
  ModelConfigInput,
  parseSafetensors,
} from './index';

const CFG: ModelConfigInput = {
  vocabSize: 20,
  hiddenSize: 16,
  intermediateSize: 24,
  numHiddenLayers: 2,
  numAttentionHeads: 4,
  numKeyValueHeads: 2,
};
const tokens = new Int32Array([3, 7, 1, 9, 4, 4, 2, 8, 5, 0, 6, 11]);
const parents = new Int32Array([-1, 0, 1, 2, 2, 1, 5, 5, 7, -1, 9, 10]);
const coef = Float32Array.from(parents, (p, i) => (p < 0 ? 0 : ((i % 3) - 1) * 0.5));
const root = mkdtempSync(join(tmpdir(), 'anvil-lora-'));
afterAll(() => fsp.rm(root, { recursive: true, force: true }));

async function trainStep(m: Model) {
  await m.zeroGrad();
  const f = await m.forward({ tokens, parents });
  await m.backward(f, coef);
  f.handle.dispose();
  await m.step({ lr: 5e-3 });
}

const bits = (x: Float32Array) => Buffer.from(x.buffer, x.byteOffset, x.byteLength);

async function trained(seed = 1): Promise<Model> {
  const m = Model.create(CFG, { seed, initStd: 0.2 });
  await m.enableLora({ rank: 4, alpha: 8, dropout: 0.05, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'up_proj', 'down_proj'] });
  await trainStep(m);
  await trainStep(m);
  return m;
}

describe('LoRA adapter files', () => {
  it("are PEFT's: adapter_config.json and adapter_model.safetensors with PEFT key names and shapes", async () => {
    const m = await trained();
    const dir = join(root, 'peft');
    await m.saveAdapter(dir, { baseModelNameOrPath: 'HuggingFaceTB/SmolLM2-135M-Instruct' });
    const cfg = JSON.parse(await fsp.readFile(join(dir, ADAPTER_CONFIG_FILE), 'utf8'));
    expect(cfg).toMatchObject({
      peft_type: 'LORA',
      task_type: 'CAUSAL_LM',
      r: 4,
      lora_alpha: 8,
      lora_dropout: 0.05,
      bias: 'none',
      base_model_name_or_path: 'HuggingFaceTB/SmolLM2-135M-Instruct',
      target_modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'up_proj', 'down_proj'],
      use_dora: false,
      use_rslora: false,
      fan_in_fan_out: false,
    });
    const st = parseSafetensors(await fsp.readFile(join(dir, ADAPTER_WEIGHTS_FILE)));
    const names = [...st.tensors.keys()].sort();
    expect(names).toHaveLength(2 * 6 * 2);
    expect(st.tensors.get('base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight')?.shape).toEqual([4, 16]);
    expect(st.tensors.get('base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight')?.shape).toEqual([16, 4]);
    expect(st.tensors.get('base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight')?.shape).toEqual([8, 4]);
    expect(st.tensors.get('base_model.model.model.layers.1.self_attn.o_proj.lora_A.weight')?.shape).toEqual([4, 16]);
    expect(st.tensors.get('base_model.model.model.layers.1.mlp.up_proj.lora_B.weight')?.shape).toEqual([24, 4]);
    expect(st.tensors.get('base_model.model.model.layers.1.mlp.down_proj.lora_A.weight')?.shape).toEqual([4, 24]);
    expect(names.every((n) => /^base_model\.model\.model\.layers\.\d+\.(self_attn|mlp)\.\w+_proj\.lora_[AB]\.weight$/.test(n))).toBe(true);
    expect([...st.tensors.values()].every((t) => t.dtype === 'F32')).toBe(true);
    expect(st.metadata.format).toBe('pt');
    expect(st.metadata['anvil.base_fingerprint']).toMatch(/^sha256:[0-9a-f]{64}$/);
    m.dispose();
  });

  it('round-trip bit for bit onto the same base, with the same outputs', async () => {
    const m = await trained();
    const dir = join(root, 'roundtrip');
    await m.saveAdapter(dir);
    const f = await m.forward({ tokens, parents });
    const m2 = Model.create(CFG, { seed: 1, initStd: 0.2 });
    const cfg = await m2.loadAdapter(dir);
    expect(cfg).toEqual({
      rank: 4,
      alpha: 8,
      dropout: 0.05,
      seed: 0,
      targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'up_proj', 'down_proj'],
    });
    expect(m2.loraTensors.map((t) => t.name)).toEqual(m.loraTensors.map((t) => t.name));
    m2.loraTensors.forEach((t, i) => expect(bits(t.data).equals(bits(m.loraTensors[i].data)), t.name).toBe(true));
    const f2 = await m2.forward({ tokens, parents });
    expect(f2.logp).toEqual(f.logp);
    m.dispose();
    m2.dispose();
  });

  it('resume: adapters and their AdamW state restored, the next step lands where the uninterrupted one does', async () => {
    const a = await trained();
    const dir = join(root, 'resume');
    await a.saveAdapter(dir, { optimizer: true });
    const os = parseSafetensors(await fsp.readFile(join(dir, ADAPTER_OPTIMIZER_FILE)));
    expect(os.metadata.step).toBe('2');
    expect(os.tensors.get('adam_m')?.shape).toEqual([a.memory().adapterParams]);
    const b = Model.create(CFG, { seed: 1, initStd: 0.2 });
    await b.loadAdapter(dir, { optimizer: true });
    expect(b.stepCount).toBe(2);
    const c = Model.create(CFG, { seed: 1, initStd: 0.2 }); // adapters without their moments
    await c.loadAdapter(dir);
    await trainStep(a);
    await trainStep(b);
    await trainStep(c);
    let bGap = 0,
      cGap = 0;
    a.loraTensors.forEach((t, i) => {
      expect(bits(b.loraTensors[i].data).equals(bits(t.data)), t.name).toBe(true);
      for (let k = 0; k < t.numel; k++) {
        bGap = Math.max(bGap, Math.abs(b.loraTensors[i].data[k] - t.data[k]));
        cGap = Math.max(cGap, Math.abs(c.loraTensors[i].data[k] - t.data[k]));
      }
    });
    expect(bGap).toBe(0);
    expect(cGap).toBeGreaterThan(1e-4); // fresh moments would land elsewhere
    for (const m of [a, b, c]) m.dispose();
  });

  it('refuses an adapter of another base (fingerprint), of another shape, or damaged, and keeps its own adapters', async () => {
    const m = await trained();
    const dir = join(root, 'good');
    await m.saveAdapter(dir, { optimizer: false });
    const other = Model.create(CFG, { seed: 2, initStd: 0.2 }); // same shape, other weights
    await other.enableLora({ rank: 2, alpha: 2, targets: ['q_proj'] });
    const before = other.loraTensors.map((t) => Float32Array.from(t.data));
    await expect(other.loadAdapter(dir)).rejects.toThrow(/trained on another base model/);
    const bigger = Model.create({ ...CFG, intermediateSize: 32 }, { seed: 1 });
    await expect(bigger.loadAdapter(dir)).rejects.toThrow(/trained on a base of shape/);
    await expect(other.loadAdapter(join(root, 'nowhere'))).rejects.toThrow(/no adapter_config.json/);
    await expect(Model.create(CFG, { seed: 1, initStd: 0.2 }).loadAdapter(dir, { optimizer: true })).rejects.toThrow(/adapter_optimizer/);

    const variant = async (name: string, edit: (cfg: Record<string, unknown>) => void) => {
      const d = join(root, name);
      await fsp.mkdir(d, { recursive: true });
      const cfg = JSON.parse(await fsp.readFile(join(dir, ADAPTER_CONFIG_FILE), 'utf8'));
      edit(cfg);
      await fsp.writeFile(join(d, ADAPTER_CONFIG_FILE), JSON.stringify(cfg));
      await fsp.copyFile(join(dir, ADAPTER_WEIGHTS_FILE), join(d, ADAPTER_WEIGHTS_FILE));
      return d;
    };
    await expect(other.loadAdapter(await variant('ia3', (c) => (c.peft_type = 'IA3')))).rejects.toThrow(/peft_type must be "LORA"/);
    await expect(other.loadAdapter(await variant('dora', (c) => (c.use_dora = true)))).rejects.toThrow(/use_dora/);
    await expect(other.loadAdapter(await variant('regex', (c) => (c.target_modules = '.*proj')))).rejects.toThrow(/target_modules/);
    await expect(other.loadAdapter(await variant('rank', (c) => (c.r = 3)))).rejects.toThrow(/has shape \[4, 16\], expected \[3, 16\]/);
    await expect(other.loadAdapter(await variant('more', (c) => (c.target_modules = ['q_proj', 'gate_proj'])))).rejects.toThrow(
      /gate_proj\.lora_A\.weight is missing/,
    );
    await expect(other.loadAdapter(await variant('fewer', (c) => (c.target_modules = ['q_proj'])))).rejects.toThrow(/unexpected tensors/);
    await expect(other.loadAdapter(await variant('lacks', (c) => (c.target_modules = ['c_attn'])))).rejects.toThrow(
      /no module named "c_attn"/,
    );
    const trunc = await variant('trunc', (c) => c); // unchanged config, truncated weights below
    const w = await fsp.readFile(join(trunc, ADAPTER_WEIGHTS_FILE));
    await fsp.writeFile(join(trunc, ADAPTER_WEIGHTS_FILE), w.subarray(0, w.length - 10));
    await expect(other.loadAdapter(trunc)).rejects.toThrow(/adapter_model.safetensors/);

    // none of it touched the model's own adapters
    expect(other.lora?.rank).toBe(2);
    other.loraTensors.forEach((t, i) => expect(bits(t.data).equals(bits(before[i]))).toBe(true));
    await expect(other.loadAdapter(dir)).rejects.toBeInstanceOf(LoraAdapterError);
    for (const x of [m, other, bigger]) x.dispose();
  });

  it("loads PEFT's own files, which record no base (checked by shape only), as F16 too", async () => {
    const m = await trained();
    const dir = join(root, 'peft-f16');
    await m.saveAdapter(dir);
    // rewrite the weights as PEFT would from a half-precision run: F16, metadata {format: pt} only
    const st = parseSafetensors(await fsp.readFile(join(dir, ADAPTER_WEIGHTS_FILE)));
    const { writeSafetensors } = await import('./safetensors');
    const toF16 = (x: number) => {
      const f = new Float32Array([x]),
        u = new Uint32Array(f.buffer)[0];
      const s = (u >>> 16) & 0x8000,
        e = ((u >>> 23) & 0xff) - 127 + 15,
        mant = (u >>> 13) & 0x3ff;
      return e <= 0 ? s : e >= 31 ? s | 0x7c00 : s | (e << 10) | mant;
    };
    const tensors = [...st.tensors].map(([name, t]) => {
      const f = new Float32Array(t.bytes.buffer.slice(t.bytes.byteOffset, t.bytes.byteOffset + t.bytes.byteLength));
      const h = new Uint16Array(f.length).map((_, i) => toF16(f[i]));
      return { name, shape: t.shape, dtype: 'F16' as const, data: new Uint8Array(h.buffer) };
    });
    await writeSafetensors(join(dir, ADAPTER_WEIGHTS_FILE), tensors, { format: 'pt' });
    const m2 = Model.create(CFG, { seed: 7 }); // another base: without a recorded fingerprint, only the shape is checked
    await m2.loadAdapter(dir);
    let worst = 0; // F16 keeps 10 mantissa bits (values under 6e-5 flush to zero in this conversion)
    m2.loraTensors.forEach((t, i) =>
      t.data.forEach(
        (v, k) => (worst = Math.max(worst, Math.abs(v - m.loraTensors[i].data[k]) - 1e-3 * Math.abs(m.loraTensors[i].data[k]))),
      ),
    );
    expect(worst).toBeLessThanOrEqual(1e-4);
    m.dispose();
    m2.dispose();
  });
});
