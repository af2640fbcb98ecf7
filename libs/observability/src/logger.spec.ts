import { describe, expect, it } from 'vitest';
import { createLogger } from './logger';
import { ServiceMetrics } from './metrics';

describe('logger', () => {
  it('writes JSON lines at or above its level, with child fields and errors', () => {
    const lines: string[] = [];
    const log = createLogger({ service: 'svc', level: 'info', sink: (l) => lines.push(l) });
    log.debug('hidden');
    log.child({ rolloutId: 'r1' }).error('boom', { err: new Error('bad') });
    expect(lines).toHaveLength(1);
    const rec = JSON.parse(lines[0]);
    expect(rec).toMatchObject({ level: 'error', msg: 'boom', service: 'svc', rolloutId: 'r1', err: { message: 'bad' } });
  });
});

describe('ServiceMetrics', () => {
  it('renders prefixed metrics with the service label', async () => {
    const m = new ServiceMetrics('gateway');
    m.counter('requests_total', 'requests').inc();
    const { body, contentType } = await m.render();
    expect(contentType).toContain('text/plain');
    expect(body).toMatch(/anvil_requests_total\{service="gateway"\} 1/);
    expect(body).toContain('anvil_process_');
  });
});
