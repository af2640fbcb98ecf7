import { describe, expect, it } from 'vitest';
import { RenderCache } from './render-cache';

describe('RenderCache', () => {
  it('keys by the exact serialisation: what a template could print differently is a different entry', () => {
    const a = RenderCache.key([{ role: 'user', content: 'hi' }], null, {});
    expect(RenderCache.key([{ content: 'hi', role: 'user' }], null, {})).not.toBe(a);
    expect(RenderCache.key([{ role: 'user', content: 'hi' }], null, {})).toBe(a);
  });

  it('evicts the least recently used entries beyond its size', () => {
    const c = new RenderCache(30);
    c.put('a', { text: '0123456789', promptIds: [1] });
    c.put('b', { text: '0123456789', promptIds: [1] });
    expect(c.get('a')?.text).toBe('0123456789'); // a is now the most recent
    c.put('c', { text: '0123456789', promptIds: [1] });
    expect(c.get('b')).toBeUndefined();
    expect(c.get('a')).toBeDefined();
    expect(c.get('c')).toBeDefined();
  });
});
