import { describe, expect, it } from 'vitest';
import { runDatabaseName } from './run-database';

describe('runDatabaseName', () => {
  it('is a PostgreSQL identifier of at most 63 bytes', () => {
    const name = runDatabaseName('stack-2026-12-02T07-15-12-439Z-c28a5d');
    expect(name).toBe('anvil_stack_2026_12_02t07_15_12_439z_c28a5d');
    expect(runDatabaseName('x'.repeat(100))).toHaveLength(63);
    expect(runDatabaseName('A.B-c')).toMatch(/^[a-z_][a-z0-9_]*$/);
  });
});
