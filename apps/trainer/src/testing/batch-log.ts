// Test support: train batches as the Data Pool cuts them (v1, inline samples) and its batch log.
import { createEventAt } from '@anvil/contracts';
import { seededRandom } from '@anvil/rl';
import type { BatchSource, TrainBatchEvent } from '../runtime';

/** A v1 (inline) batch of two groups x two rollouts, each one call, over the byte vocabulary. */
export function batchEvent(step: number, seed: number): TrainBatchEvent {
  const rand = seededRandom(seed);
  const tok = () => Math.floor(rand() * 250);
  const prompt = Array.from({ length: 8 }, tok);
  const samples = [0, 1, 2, 3].map((i) => {
    const out = Array.from({ length: 4 }, tok);
    return {
      sampleId: `s${step}-${i}`,
      trajectoryId: `t${step}-${i}`,
      groupId: `g${step}-${i >> 1}`,
      promptIds: Int32Array.from([...prompt, i]),
      outputIds: Int32Array.from(out),
      behaviourLogprobs: Float32Array.from(out, () => -5.6),
      outputVersions: Uint32Array.from(out, () => step),
      advantage: i % 2 ? 1 : -1,
      lossWeight: 1,
    };
  });
  return createEventAt(
    'train_batch.created',
    1,
    { batchId: `b${step}`, step, trajectoryIds: samples.map((s) => s.trajectoryId), samples, policyVersion: step, createdAt: Date.now() },
    { key: 'run', producer: 'test' },
  ) as unknown as TrainBatchEvent;
}

/** The batch log a Data Pool keeps: every cut batch by step (v1 batches only: they inline their samples). */
export class LogSource implements BatchSource {
  constructor(readonly log: TrainBatchEvent[]) {}
  tree(): never {
    throw new Error('v2 batches are not used in this test');
  }
  async since(_run: string | null, from: number) {
    return this.log.filter((e) => e.payload.step >= from).sort((a, b) => a.payload.step - b.payload.step);
  }
}
