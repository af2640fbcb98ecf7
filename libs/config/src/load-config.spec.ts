import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigError, loadConfig } from './load-config';
import { httpUrl, port, secret, serviceBaseEnv } from './fields';

const schema = z.object({ ...serviceBaseEnv, PORT: port(8080), ADMIN_TOKEN: secret(), PROXY_URL: httpUrl() });

describe('loadConfig', () => {
  it('parses a valid environment with defaults', () => {
    const cfg = loadConfig('svc', schema, {
      KAFKA_BROKERS: '127.0.0.1:19092, 127.0.0.1:19093',
      DATABASE_URL: 'postgres://anvil@127.0.0.1:15432/anvil',
      ADMIN_TOKEN: 'x'.repeat(32),
      PROXY_URL: 'http://127.0.0.1:8081',
    });
    expect(cfg.KAFKA_BROKERS).toEqual(['127.0.0.1:19092', '127.0.0.1:19093']);
    expect(cfg.PORT).toBe(8080);
    expect(cfg.LOG_LEVEL).toBe('info');
  });

  it('reports every problem at once, without echoing secret values', () => {
    let err: ConfigError | undefined;
    try {
      loadConfig('svc', schema, { KAFKA_BROKERS: 'no-port', DATABASE_URL: 'mysql://x', PORT: '99999', ADMIN_TOKEN: 'hunter2' });
    } catch (e) {
      err = e as ConfigError;
    }
    expect(err).toBeInstanceOf(ConfigError);
    const names = err!.problems.map((p) => p.split(':')[0]);
    expect(new Set(names)).toEqual(new Set(['KAFKA_BROKERS', 'DATABASE_URL', 'PORT', 'ADMIN_TOKEN', 'PROXY_URL']));
    expect(err!.message).not.toContain('hunter2');
    expect(err!.message).toContain('5 problems');
  });

  it('needs KAFKA_BROKERS only for the Kafka bus, and takes an embedded database URL', () => {
    const embedded = loadConfig('svc', schema, {
      EVENT_BUS_KIND: 'memory',
      DATABASE_URL: 'pglite:///tmp/anvil-db',
      ADMIN_TOKEN: 'x'.repeat(32),
      PROXY_URL: 'http://127.0.0.1:8081',
    });
    expect(embedded.EVENT_BUS_KIND).toBe('memory');
    expect(embedded.KAFKA_BROKERS).toEqual([]);
    expect(
      loadConfig('svc', schema, {
        EVENT_BUS_KIND: 'memory',
        DATABASE_URL: 'memory',
        ADMIN_TOKEN: 'x'.repeat(32),
        PROXY_URL: 'http://127.0.0.1:8081',
      }).DATABASE_URL,
    ).toBe('memory');
    let err: ConfigError | undefined;
    try {
      loadConfig('svc', schema, {
        DATABASE_URL: 'memory',
        ADMIN_TOKEN: 'x'.repeat(32),
        PROXY_URL: 'http://127.0.0.1:8081',
        EVENT_BUS_KIND: 'rabbit',
      });
    } catch (e) {
      err = e as ConfigError;
    }
    expect(err!.problems.map((p) => p.split(':')[0]).sort()).toEqual(['EVENT_BUS_KIND', 'KAFKA_BROKERS']);
  });

  it('refuses placeholder secrets', () => {
    expect(() => loadConfig('svc', z.object({ T: secret(6) }), { T: 'changeme' })).toThrow(/placeholder/);
  });
});
