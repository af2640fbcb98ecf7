import { describe, expect, it } from 'vitest';
import { routeSessionRequest } from './route';

const BASE = '/sessions/anvil-sess_abcdefghijklmnop.SECRET/v1';

describe('routeSessionRequest', () => {
  it('maps every /v1 path of the agent API onto the session URL, query kept', () => {
    for (const p of ['/v1/chat/completions', '/v1/completions', '/v1/responses', '/v1/messages', '/v1/models', '/v1']) {
      expect(routeSessionRequest(p, BASE)).toEqual({ ok: true, path: `/sessions/anvil-sess_abcdefghijklmnop.SECRET${p}` });
    }
    expect(routeSessionRequest('/v1/models?limit=2', BASE)).toEqual({
      ok: true,
      path: '/sessions/anvil-sess_abcdefghijklmnop.SECRET/v1/models?limit=2',
    });
  });

  it('refuses the admin API, other sessions, other hosts and anything outside /v1', () => {
    const refused = [
      '/admin/v1/sessions',
      '/sessions/anvil-sess_other.KEY/v1/chat/completions',
      'http://127.0.0.1:9999/v1/chat/completions',
      '127.0.0.1:9999',
      '*',
      '/',
      '/v10/chat',
      '/metrics',
      '',
    ];
    for (const p of refused) expect(routeSessionRequest(p, BASE).ok, p).toBe(false);
  });

  it('refuses dot segments, raw or encoded, and encoded separators', () => {
    const refused = [
      '/v1/../admin/v1/sessions',
      '/v1/./chat/completions',
      '/v1/%2e%2e/admin',
      '/v1/%2E%2E/%2E%2E/admin/v1/sessions',
      '/v1/..%2fadmin',
      '/v1/chat%2fcompletions',
      '/v1/x%5c..%5cadmin',
      '/v1//chat',
      '/v1/chat\\..\\admin',
      '/v1/%zz',
      '/v1/chat completions',
      '/v1/x%00',
    ];
    for (const p of refused) expect(routeSessionRequest(p, BASE).ok, p).toBe(false);
  });

  it('says why it refused', () => {
    const r = routeSessionRequest('/admin/v1/sessions', BASE);
    expect(r).toEqual({ ok: false, why: 'only the session API (/v1/...) is reachable, not /admin/v1/sessions' });
  });
});
