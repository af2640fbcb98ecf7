import { describe, expect, it } from 'vitest';
import { createEventAt, decodeEvent, encodeEvent } from '../envelope';
import { weightsPublished } from '../testing';
import { EVENTS } from './registry';

const base = { checkpointUri: '/models/base', fingerprint: `sha256:${'0f'.repeat(32)}` };

/** weights.published v2: v1 + what the checkpoint holds (full weights, or a LoRA adapter over a named base). */
describe('weights.published v2 (full weights or a LoRA adapter)', () => {
  it('is the current version; an adapter names its base, and travels through a frame unchanged', () => {
    expect(EVENTS['weights.published'].current).toBe(2);
    const event = weightsPublished(3, { weights: 'lora-adapter', base });
    const decoded = decodeEvent(encodeEvent(event));
    if (decoded.type !== 'weights.published' || decoded.version !== 2) throw new Error('wrong type');
    expect(decoded.payload).toMatchObject({ version: 3, weights: 'lora-adapter', base });
  });

  it('a v1 event stays readable (full weights); an adapter without a base, or full weights with one, is refused', () => {
    const { payload } = weightsPublished(2);
    const v1 = createEventAt('weights.published', 1, payload, { key: '2', producer: 'test' });
    const decoded = decodeEvent(encodeEvent(v1));
    expect(decoded.version).toBe(1);
    expect((decoded.payload as { weights?: string }).weights ?? 'full').toBe('full');
    const v2 = EVENTS['weights.published'].versions[2];
    expect(v2.safeParse({ ...payload, weights: 'full' }).success).toBe(true);
    const noBase = v2.safeParse({ ...payload, weights: 'lora-adapter' });
    expect(JSON.stringify(noBase.error?.issues)).toMatch(/names the base checkpoint/);
    const fullWithBase = v2.safeParse({ ...payload, weights: 'full', base });
    expect(JSON.stringify(fullWithBase.error?.issues)).toMatch(/only a LoRA adapter/);
    expect(v2.safeParse({ ...payload, weights: 'lora-adapter', base: { ...base, fingerprint: 'abc' } }).success).toBe(false);
    expect(v2.safeParse({ ...payload, weights: 'merged' }).success).toBe(false);
  });
});
