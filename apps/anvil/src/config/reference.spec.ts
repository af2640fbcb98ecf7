import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../repo-root';
import { renderConfigReference } from './reference';
import { runConfigSchema } from './run-config';

describe('the configuration reference', () => {
  it('is docs/configuration.md, rendered from the schema (run `anvil config docs --write` after changing a knob)', () => {
    expect(readFileSync(join(repoRoot, 'docs', 'configuration.md'), 'utf8')).toBe(renderConfigReference());
  });

  it('documents every knob: each has a row with a description', () => {
    const md = renderConfigReference();
    const rows = md.split('\n').filter((l) => l.startsWith('| `'));
    expect(rows.length).toBeGreaterThan(60);
    for (const row of rows) expect(row.split('|')[4].trim(), row).not.toBe('');
    for (const section of Object.keys(runConfigSchema.shape)) expect(md).toContain(`\`${section}`);
  });
});
