import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InferenceProxyClient } from '@anvil/inference-client';
import { ByteTokenizer } from '@anvil/tokenizer';
import { InferenceProxyProbe, VocabularyMismatchError, vocabularyMismatch } from './inference-proxy-probe';

describe('vocabularyMismatch', () => {
  it('accepts equal vocabularies and a padded embedding, refuses fewer ids or a vocabulary many times larger', () => {
    expect(vocabularyMismatch(272, 272)).toBeNull();
    expect(vocabularyMismatch(151_665, 151_936)).toBeNull(); // Qwen2.5's padded embedding
    expect(vocabularyMismatch(272, null)).toBeNull(); // the engine does not say (vLLM, SGLang)
    expect(vocabularyMismatch(272, 2048)).toMatch(/1776 ids more than the tokenizer/);
    expect(vocabularyMismatch(272, 256)).toMatch(/16 ids fewer than the tokenizer/);
  });
});

describe('InferenceProxyProbe over a real HTTP client', () => {
  let server: Server;
  let url = '';
  let report: unknown = null;
  beforeAll(async () => {
    server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(report));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));
  const replica = (over: Record<string, unknown>) => ({
    id: 'r1',
    healthy: true,
    routable: true,
    inFlight: 0,
    weightsVersion: null,
    prefixCacheHitRate: 0,
    model: 'm',
    ...over,
  });

  it("is ready with a routable replica of the tokenizer's vocabulary", async () => {
    report = { deployment: 'd', replicas: [replica({ vocabSize: 272 })] };
    const probe = new InferenceProxyProbe(new InferenceProxyClient({ baseUrl: url }), new ByteTokenizer(), () => expect.unreachable());
    await expect(probe.check()).resolves.toBe(1);
    expect(probe.checked).toBe(true);
    report = { deployment: 'd', replicas: [replica({ vocabSize: 272, routable: false })] };
    await expect(probe.check()).rejects.toThrow('the inference-proxy has no routable replica (of 1)');
  });

  it('reports a mismatched vocabulary once, naming both sizes, and stays not ready', async () => {
    report = { deployment: 'd', replicas: [replica({ vocabSize: 2048, model: 'built-in tiny' })] };
    const seen: VocabularyMismatchError[] = [];
    const probe = new InferenceProxyProbe(new InferenceProxyClient({ baseUrl: url }), new ByteTokenizer(), (e) => seen.push(e));
    await expect(probe.check()).rejects.toBeInstanceOf(VocabularyMismatchError);
    await expect(probe.check()).rejects.toThrow(
      /vocabulary \(2048 ids, replica r1, model built-in tiny\) disagrees with the gateway tokenizer's \(272 ids, byte\)/,
    );
    expect(seen).toHaveLength(1);
  });

  it('an unreachable proxy is not ready, and the message carries no address', async () => {
    const probe = new InferenceProxyProbe(new InferenceProxyClient({ baseUrl: 'http://127.0.0.1:9' }), new ByteTokenizer(), () =>
      expect.unreachable(),
    );
    const err = await probe.check().catch((e: Error) => e);
    expect((err as Error).message).toBe('the inference-proxy is unreachable');
    expect(probe.checked).toBe(false);
  });
});
