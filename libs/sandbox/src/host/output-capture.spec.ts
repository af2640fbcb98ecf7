import { describe, expect, it } from 'vitest';
import { OutputCapture } from './output-capture';

describe('OutputCapture', () => {
  it('keeps the first cap bytes, the last ones apart, and counts everything', () => {
    const c = new OutputCapture(10);
    c.push(Buffer.from('0123456'));
    c.push(Buffer.from('789abcdef'));
    c.push(Buffer.from('XYZ'));
    expect(c.text()).toBe('0123456789');
    expect(c.tail()).toBe('9abcdefXYZ'.slice(-10));
    expect(c.total).toBe(19);
  });

  it('copies what it keeps (a reused chunk does not change the kept text)', () => {
    const c = new OutputCapture(100);
    const chunk = Buffer.from('hello');
    c.push(chunk);
    chunk.fill(0x78);
    expect(c.text()).toBe('hello');
    expect(c.tail()).toBe('hello');
  });
});
