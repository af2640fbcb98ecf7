import { Model } from '@anvil/engine';
(async () => {
  const model = Model.create({ vocabSize: 8192, hiddenSize: 512, intermediateSize: 1536, numHiddenLayers: 4, numAttentionHeads: 8, numKeyValueHeads: 4 }, { seed: 1 });
  const N = 2048, L = Number(process.env.SEQ ?? 512);
  const pack = { tokens: Int32Array.from({ length: N }, (_, i) => (i * 31) % 8192), parents: Int32Array.from({ length: N }, (_, i) => (i % L === 0 ? -1 : i - 1)) };
  for (let rep = 0; rep < Number(process.env.REPS ?? 4); rep++) {
    let t = performance.now();
    const fw = await model.forward(pack);
    const tf = performance.now() - t; t = performance.now();
    await model.backward(fw, Float32Array.from({ length: N }, (_, i) => (pack.parents[i] >= 0 ? -1 / N : 0)));
    const tb = performance.now() - t; t = performance.now();
    await model.step({ lr: 1e-3 });
    console.log('fwd', tf.toFixed(0), 'bwd', tb.toFixed(0), 'step', (performance.now() - t).toFixed(0));
    fw.handle.dispose();
  }
})();
