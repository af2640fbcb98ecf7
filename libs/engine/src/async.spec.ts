// Heavy calls run off the event loop and return promises; handles are freed deterministically.
import { describe, expect, it } from 'vitest';
import { Model, setThreads, getThreads, engineInfo } from './index';
import { pinBlasKernels, quietBlasThreads } from './loader';

describe('async engine calls', () => {
  it('the event loop keeps turning while a large forward / backward / step runs', async () => {
    const model = Model.create(
      { vocabSize: 4096, hiddenSize: 256, intermediateSize: 768, numHiddenLayers: 4, numAttentionHeads: 4, numKeyValueHeads: 2 },
      { seed: 1 },
    );
    const N = 1536;
    const pack = {
      tokens: Int32Array.from({ length: N }, (_, i) => (i * 31) % 4096),
      parents: Int32Array.from({ length: N }, (_, i) => i - 1),
    };
    let ticks = 0;
    let running = true;
    const spin = () => {
      if (!running) return;
      ticks++;
      setImmediate(spin);
    };
    setImmediate(spin);
    const t0 = Date.now();
    const p = model.forward(pack);
    expect(p).toBeInstanceOf(Promise);
    const fw = await p;
    const afterForward = ticks;
    const b = model.backward(
      fw,
      Float32Array.from({ length: N }, (_, i) => (i ? -1 / N : 0)),
    );
    expect(b).toBeInstanceOf(Promise);
    await b;
    const s = model.step({ lr: 1e-3 });
    expect(s).toBeInstanceOf(Promise);
    await s;
    running = false;
    const ms = Date.now() - t0;
    expect(ms).toBeGreaterThan(50); // the work is big enough that a blocking call would starve the loop
    expect(afterForward).toBeGreaterThan(5);
    expect(ticks).toBeGreaterThan(10);
    expect(fw.handle.activationBytes).toBeGreaterThan(N * 256 * 4 * 4);
    fw.handle.dispose();
    expect(fw.handle.activationBytes).toBe(0);
    expect(model.memory().cachedBytes).toBeGreaterThan(0); // the arena went back to the cache
    model.trimCache();
    expect(model.memory().cachedBytes).toBe(0);
    model.dispose();
  });

  it('setThreads / getThreads and engine info', () => {
    const before = getThreads();
    setThreads(1);
    expect(getThreads()).toBe(1);
    setThreads(before);
    expect(() => setThreads(0)).toThrow(/integer in \[1, 1024\]/);
    const info = engineInfo();
    expect(info.backend).toBe('cpu');
    expect(info.info.blas).toMatch(/OpenBLAS/);
    // the kernels are pinned on x64 so that runs reproduce across CPUs (loader.ts, pinBlasKernels)
    if (process.arch === 'x64' && process.env.OPENBLAS_CORETYPE === 'Haswell') expect(info.info.blas).toMatch(/ Haswell /);
  });

  it('pins the Haswell GEMM kernels on x64 unless the user chose a core type', () => {
    const env: Record<string, string | undefined> = {};
    pinBlasKernels(env, 'x64');
    expect(env.OPENBLAS_CORETYPE).toBe('Haswell');
    const chosen: Record<string, string | undefined> = { OPENBLAS_CORETYPE: 'SkylakeX' };
    pinBlasKernels(chosen, 'x64');
    expect(chosen.OPENBLAS_CORETYPE).toBe('SkylakeX');
    const arm: Record<string, string | undefined> = {};
    pinBlasKernels(arm, 'arm64');
    expect(arm.OPENBLAS_CORETYPE).toBeUndefined();
  });

  it("lets OpenBLAS's idle threads sleep almost at once unless the user chose a timeout", () => {
    const env: Record<string, string | undefined> = {};
    quietBlasThreads(env);
    expect(env.OPENBLAS_THREAD_TIMEOUT).toBe('4');
    const chosen: Record<string, string | undefined> = { OPENBLAS_THREAD_TIMEOUT: '28' };
    quietBlasThreads(chosen);
    expect(chosen.OPENBLAS_THREAD_TIMEOUT).toBe('28');
    // this process loaded the addon through the loader, which set it before OpenBLAS read it
    expect(process.env.OPENBLAS_THREAD_TIMEOUT).toBeTruthy();
  });

  it('results do not depend on the thread count', async () => {
    const model = Model.tiny({ seed: 2 });
    const pack = {
      tokens: Int32Array.from({ length: 64 }, (_, i) => (i * 7) % model.config.vocabSize),
      parents: Int32Array.from({ length: 64 }, (_, i) => (i % 16 === 0 ? -1 : i - 1 - (i % 3 === 0 ? 1 : 0))),
    };
    const before = getThreads();
    setThreads(1);
    const a = await model.forward(pack);
    setThreads(2);
    const b = await model.forward(pack);
    setThreads(before);
    for (let i = 0; i < 64; i++) expect(Math.abs(a.logp[i] - b.logp[i])).toBeLessThan(1e-5);
  });
});

describe('garbage collection', () => {
  it('an undisposed handle releases its activations when collected (finalizer)', async () => {
    const { spawnSync } = await import('node:child_process');
    const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join, resolve } = await import('node:path');
    const dir = mkdtempSync(join(tmpdir(), 'anvil-gc-'));
    const script = join(dir, 'gc.ts');
    const index = resolve(__dirname, 'index.ts');
    writeFileSync(
      script,
      `import { Model } from ${JSON.stringify(index)};
(async () => {
  const m = Model.tiny({ seed: 1 });
  const pack = { tokens: new Int32Array([1, 2, 3, 4]), parents: new Int32Array([-1, 0, 1, 2]) };
  const before = m.memory().cachedBytes;
  const bytes = await (async () => (await m.forward(pack)).handle.activationBytes)(); // the handle is dropped undisposed
  for (let i = 0; i < 20 && m.memory().cachedBytes - before < bytes; i++) {
    (globalThis as any).gc();
    await new Promise((r) => setTimeout(r, 5));
  }
  console.log(JSON.stringify({ bytes, cached: m.memory().cachedBytes }));
})();
`,
    );
    const r = spawnSync(process.execPath, ['--expose-gc', '--import', 'tsx', script], {
      encoding: 'utf8',
      cwd: resolve(__dirname, '../../..'),
    });
    rmSync(dir, { recursive: true, force: true });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!);
    expect(out.bytes).toBeGreaterThan(0);
    expect(out.cached).toBeGreaterThanOrEqual(out.bytes); // the collected handle's arena returned to the model
  });
});
