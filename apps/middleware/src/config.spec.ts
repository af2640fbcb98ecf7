import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '@anvil/config';
import { dataPoolConfig } from './data-pool/config';
import { dataPoolOptionsOf, middlewareEnv } from './config';

const base = { KAFKA_BROKERS: '127.0.0.1:19092', DATABASE_URL: 'postgres://anvil@127.0.0.1:15432/anvil' };
const load = (env: Record<string, string>) => loadConfig('middleware', middlewareEnv, env);

describe('middleware configuration', () => {
  it('defaults: libs/rl filters (compact max_context/max_steps/timeout, 2 env retries, over-long kept, zero-variance drop), GRPO, N = 8', () => {
    const options = dataPoolOptionsOf(load(base));
    expect(options).toMatchObject({ group: 'anvil.middleware.data-pool', concurrency: 3, migrateOnStart: true, pruneIntervalMs: 60_000 });
    const c = dataPoolConfig(options.pool);
    expect(c.filters).toMatchObject({
      okReasons: ['completed'],
      compactReasons: ['max_context', 'max_steps', 'timeout'],
      envErrorReasons: ['env_error'],
      dropReasons: ['aborted'],
      maxEnvRetries: 2,
      maskTruncated: false,
      dropZeroVariance: true,
    });
    expect(c).toMatchObject({
      runId: 'default',
      advantage: { estimator: 'grpo', processRewardWeight: 0 },
      window: { inFlight: 8 },
      batchTrajectories: 4,
      callWaitMs: 30_000,
      groupTimeoutMs: 1_800_000,
    });
  });

  it('every knob reaches the Data Pool; a reason taken out of compact filtering trains as a completion', () => {
    const c = dataPoolConfig(
      dataPoolOptionsOf(
        load({
          ...base,
          DATA_POOL_RUN_ID: 'run-7',
          DATA_POOL_ESTIMATOR: 'rloo',
          DATA_POOL_PROCESS_REWARD_WEIGHT: '0.5',
          DATA_POOL_IN_FLIGHT: '16',
          DATA_POOL_WINDOW: 'adaptive',
          DATA_POOL_HEAD_AGE_LIMIT_MS: '60000',
          DATA_POOL_BATCH_TOKENS: '100000',
          DATA_POOL_DROP_ZERO_VARIANCE: 'false',
          DATA_POOL_COMPACT_REASONS: 'max_context',
          DATA_POOL_MAX_ENV_RETRIES: '0',
          DATA_POOL_MASK_TRUNCATED: 'true',
          DATA_POOL_CALL_WAIT_MS: '5000',
          DATA_POOL_GROUP_TIMEOUT_MS: '60000',
          DATA_POOL_STALENESS_K: '3',
          DATA_POOL_LEASE_MS: '4000',
        }),
      ).pool,
    );
    expect(c).toMatchObject({
      runId: 'run-7',
      advantage: { estimator: 'rloo', processRewardWeight: 0.5 },
      window: { inFlight: 16, window: 'adaptive', headAgeLimitMs: 60_000 },
      batchTokens: 100_000,
      callWaitMs: 5_000,
      groupTimeoutMs: 60_000,
      stalenessK: 3,
      leaseMs: 4_000,
    });
    expect(c.batchTrajectories).toBeUndefined();
    expect(c.filters).toMatchObject({
      okReasons: ['completed', 'max_steps', 'timeout'],
      compactReasons: ['max_context'],
      maxEnvRetries: 0,
      maskTruncated: true,
      dropZeroVariance: false,
    });
    expect(dataPoolConfig(dataPoolOptionsOf(load({ ...base, DATA_POOL_COMPACT_REASONS: '' })).pool).filters).toMatchObject({
      compactReasons: [],
      okReasons: ['completed', 'max_context', 'max_steps', 'timeout'],
    });
  });

  it('refuses bad values, every one at once', () => {
    try {
      load({
        ...base,
        DATA_POOL_COMPACT_REASONS: 'max_context,env_error',
        DATA_POOL_MAX_ENV_RETRIES: '-1',
        DATA_POOL_MASK_TRUNCATED: 'yes',
      });
      throw new Error('the environment was accepted');
    } catch (e) {
      expect(e).toBeInstanceOf(ConfigError);
      expect([...new Set((e as ConfigError).problems.map((p) => p.split(':')[0]))].sort()).toEqual([
        'DATA_POOL_COMPACT_REASONS.1',
        'DATA_POOL_MASK_TRUNCATED',
        'DATA_POOL_MAX_ENV_RETRIES',
      ]);
    }
  });

  it('the Data Pool refuses filters that leave a finish reason unclassified', () => {
    expect(() => dataPoolConfig({ filters: { okReasons: ['completed'], compactReasons: ['max_context'] } })).toThrow(
      /finish reason\(s\) max_steps, timeout in none of/,
    );
    expect(() => dataPoolConfig({ filters: { maxEnvRetries: -1 } })).toThrow(/filters\.maxEnvRetries/);
  });
});
