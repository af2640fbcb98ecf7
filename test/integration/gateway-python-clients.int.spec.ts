import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GenerateRequest } from '@anvil/contracts';
import { tinyChatFormat } from '@anvil/tokenizer';
import { assertExtends, sessionRecords, startGatewayHarness, type GatewayHarness, type ScriptedReply } from '@anvil/gateway/testing';

/**
 * Third-party Python clients of the agent protocols, from PyPI and unchanged
 * (test/clients/requirements.txt, installed by `npm test`), against the gateway with a scripted
 * model that calls an `add` tool and then answers: the openai SDK's Responses API (create and
 * stream, a tool loop through previous_response_id), the openai-agents SDK with its default model
 * class (its own loop, the whole history sent back each turn) and the anthropic SDK (create,
 * stream, tool_result turns, count_tokens). Every loop's second call extends its first
 * token-exactly in the gateway's records.
 */
const root = join(__dirname, '..', '..');
const tok = tinyChatFormat().tokenizer;
const EOT = 258;

function script(req: GenerateRequest): ScriptedReply {
  const prompt = tok.decode(req.promptIds);
  const lastUser = prompt.slice(prompt.lastIndexOf('<|im_start|>user'));
  if (lastUser.includes('<tool_response>')) return { ids: [...tok.encode('It is 19.'), EOT] };
  if (lastUser.includes('12+7'))
    return { ids: [...tok.encode('<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 7}}\n</tool_call>'), EOT] };
  return { ids: [...tok.encode('I can only add.'), EOT] };
}

/** Runs a client script with the session's URL and key; its JSON lines. */
function runClient(file: string, env: Record<string, string>): Promise<Record<string, unknown>[]> {
  return new Promise((resolve, reject) => {
    const child = spawn('python3', [join(root, 'test', 'clients', file)], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0)
        return reject(
          new Error(`${file} exited ${code} (pip install -r test/clients/requirements.txt; npm test does):\n${err.slice(-3000)}`),
        );
      resolve(
        out
          .split('\n')
          .filter((l) => l.trim().startsWith('{'))
          .map((l) => JSON.parse(l) as Record<string, unknown>),
      );
    });
  });
}

describe('Python clients of the Responses and Messages APIs (PyPI, unchanged)', () => {
  let h: GatewayHarness;
  beforeAll(async () => {
    h = await startGatewayHarness({ script });
  });
  afterAll(() => h?.close());

  it('openai SDK: responses.create and streaming with a tool, the result through previous_response_id', async () => {
    const s = await h.createSession();
    const lines = await runClient('openai_responses.py', { ANVIL_BASE_URL: s.baseUrl, ANVIL_API_KEY: s.apiKey });
    expect(lines).toMatchObject([
      { step: 'create', status: 'completed', types: ['function_call'] },
      { step: 'tool result', status: 'completed', output_text: 'It is 19.', types: ['message'] },
      { step: 'stream', status: 'completed', types: ['function_call'] },
      { step: 'stream helper', status: 'completed', output_text: 'It is 19.', deltas: 'It is 19.' },
    ]);
    expect(lines[2].events).toEqual(
      expect.arrayContaining(['response.created', 'response.function_call_arguments.done', 'response.completed']),
    );
    const records = await sessionRecords(h, s.sessionId, 4);
    assertExtends(records[1], records[0]);
    assertExtends(records[3], records[2]);
    expect(h.requestsFor(s.sessionId).map((r) => r.promptIds)).toEqual(records.map((r) => Array.from(r.payload.promptIds)));
  });

  it('openai-agents SDK (default model class, the Responses API): Runner.run and run_streamed finish their tool loops', async () => {
    const s = await h.createSession();
    const lines = await runClient('openai_agents_run.py', { ANVIL_BASE_URL: s.baseUrl, ANVIL_API_KEY: s.apiKey });
    expect(lines).toMatchObject([
      { default_model_class: 'OpenAIResponsesModel' },
      { run: 'run', final_output: 'It is 19.', items: ['tool_call_item', 'tool_call_output_item', 'message_output_item'] },
      { run: 'streamed', final_output: 'It is 19.', items: ['tool_call_item', 'tool_call_output_item', 'message_output_item'] },
    ]);
    expect(lines[2].raw_events as number).toBeGreaterThan(0);
    const records = await sessionRecords(h, s.sessionId, 4);
    assertExtends(records[1], records[0]);
    assertExtends(records[3], records[2]);
  });

  it('anthropic SDK: messages.create and messages.stream with tool_result turns, and count_tokens', async () => {
    const s = await h.createSession();
    const lines = await runClient('anthropic_messages.py', {
      ANVIL_ANTHROPIC_BASE_URL: s.baseUrl.replace(/\/v1$/, ''),
      ANVIL_API_KEY: s.apiKey,
    });
    const use = { type: 'tool_use', name: 'add', input: { a: 12, b: 7 } };
    expect(lines).toMatchObject([
      { step: 'create', stop_reason: 'tool_use', content: [use] },
      { step: 'tool result', stop_reason: 'end_turn', content: [{ type: 'text', text: 'It is 19.' }] },
      { step: 'stream', stop_reason: 'tool_use', content: [use], text: '' },
      { step: 'stream tool result', stop_reason: 'end_turn', text: 'It is 19.' },
      { step: 'count_tokens' },
    ]);
    const records = await sessionRecords(h, s.sessionId, 4);
    assertExtends(records[1], records[0]);
    assertExtends(records[3], records[2]);
    // count_tokens counts the prompt the streamed first call was given (same conversation and tools).
    expect(lines[4].input_tokens).toBe(records[2].payload.promptIds.length);
  });
});
