import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { decodeTokenArray } from '@anvil/persistence';
import { fingerprintMessages, tinyChatFormat, type ChatMessage } from '@anvil/tokenizer';
import { SqlClient } from '../db/sql-client';
import { startGatewayHarness, type GatewayHarness, type RecordedCall } from '../testing/gateway-harness';
import { CaptureStore } from './capture-store';

/**
 * Capture rows are stored relative to their parent (so a session stores each token once, not
 * the square of its length) and rebuilt exactly: by a cold store (another gateway
 * instance), and by the down migration that makes them whole again.
 */
const tok = tinyChatFormat().tokenizer;
const EOT = 258;
const script = (req: { promptIds: number[] }) => {
  const turn = (tok.decode(req.promptIds).match(/<\|im_start\|>assistant/g) ?? []).length;
  return { ids: [...tok.encode(`reply ${turn}: ${'ok '.repeat(turn)}`), EOT] };
};

interface Row {
  id: string;
  turn_index: number;
  prompt_prefix_tokens: number;
  messages_prefix_count: number;
  prompt_ids: Buffer;
  messages_json: string;
}

describe('capture rows as deltas', () => {
  let h: GatewayHarness;
  const records = new Map<string, RecordedCall>();
  let sessionId = '';
  let history: OpenAI.Chat.ChatCompletionMessageParam[] = [];
  const TURNS = 6;

  beforeAll(async () => {
    h = await startGatewayHarness({ script });
    const s = await h.createSession({ rolloutId: 'r-deltas' });
    sessionId = s.sessionId;
    const client = new OpenAI({ baseURL: `${h.baseUrl}/v1`, apiKey: s.apiKey, maxRetries: 0 });
    history = [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'hello' },
    ];
    for (let turn = 0; turn < TURNS; turn++) {
      const { data, response } = await client.chat.completions
        .create({ model: 'anvil-tiny', messages: history, max_tokens: 64 })
        .withResponse();
      expect(response.headers.get('x-anvil-capture')).toMatch(turn === 0 ? /^branch:/ : /^extend:/);
      history.push(data.choices[0].message, { role: 'user', content: `next ${turn}` });
    }
    for (let i = 0; i < 100 && h.records.length < TURNS; i++) await new Promise((r) => setTimeout(r, 20));
    for (const r of h.records) records.set(r.payload.callId, r);
  });
  afterAll(async () => {
    await h?.close();
  });

  const rows = async () =>
    (await h.ds.query(`SELECT * FROM gateway_calls WHERE session_id = $1 ORDER BY turn_index`, [sessionId])) as Row[];

  it('stores the first call whole and every later one as what is new after its parent', async () => {
    const all = await rows();
    expect(all).toHaveLength(TURNS);
    expect(all[0]).toMatchObject({ prompt_prefix_tokens: 0, messages_prefix_count: 0 });
    let stored = 0;
    let whole = 0;
    for (const [k, row] of all.entries()) {
      const full = Array.from(records.get(row.id)?.payload.promptIds ?? []);
      const suffix = Array.from(decodeTokenArray(Int32Array, row.prompt_ids));
      if (k > 0) {
        const parent = records.get(all[k - 1].id)?.payload;
        // The prefix is the parent's prompt + output ids; the row holds only the rest.
        expect(row.prompt_prefix_tokens).toBe(records.get(row.id)?.payload.reusedPromptTokens);
        expect(row.prompt_prefix_tokens).toBeGreaterThanOrEqual((parent?.promptIds.length ?? 0) + (parent?.outputIds.length ?? 0) - 1);
        // The parent's messages + its reply; the row holds the one new user message.
        expect(row.messages_prefix_count).toBe(2 + 2 * (k - 1) + 1);
        expect(JSON.parse(row.messages_json)).toEqual([{ role: 'user', content: `next ${k - 1}` }]);
      }
      expect([...full.slice(0, row.prompt_prefix_tokens), ...suffix]).toEqual(full);
      stored += suffix.length;
      whole += full.length;
    }
    // Linear, not quadratic: each prompt token is stored about once.
    expect(stored).toBeLessThan(whole / 2);
    // The stored prompt suffixes plus the earlier replies' output ids make up the last prompt.
    const lastPrompt = records.get(all[TURNS - 1].id)?.payload.promptIds.length ?? 0;
    const earlierOutputs = all.slice(0, -1).reduce((n, r) => n + (records.get(r.id)?.payload.outputIds.length ?? 0), 0);
    expect(stored).toBeLessThanOrEqual(lastPrompt);
    expect(stored + earlierOutputs).toBeGreaterThanOrEqual(lastPrompt);
  });

  it('rebuilds the whole state of a delta row from its ancestors with a cold cache (another gateway instance)', async () => {
    const cold = new CaptureStore(new SqlClient(h.ds));
    const messages = history.slice(0, -1) as ChatMessage[]; // ends with the last reply
    const last = (await rows())[TURNS - 1];
    const state = await cold.findLongestPrefix(sessionId, fingerprintMessages(messages, null, {}));
    expect(state?.callId).toBe(last.id);
    expect(state?.promptIds).toEqual(Array.from(records.get(last.id)?.payload.promptIds ?? []));
    expect(state?.outputIds).toEqual(Array.from(records.get(last.id)?.payload.outputIds ?? []));
    expect(state?.messages.map((m) => m.content)).toEqual(messages.slice(0, -1).map((m) => m.content));
    expect(cold.cache.size).toBe(1);
  });

  it('the down migration makes every row whole again', async () => {
    // The outbox migration comes after it and is undone first: it refuses while a record is unpublished.
    for (
      let i = 0;
      i < 200 && Number(((await h.ds.query(`SELECT count(*) AS "n" FROM "gateway_outbox"`)) as { n: string }[])[0].n) > 0;
      i++
    )
      await new Promise((r) => setTimeout(r, 20));
    // Every migration after the deltas one is undone first, newest first.
    for (let undone = ''; undone !== 'GatewayCallDeltas1796200000000';) {
      undone = ((await h.ds.query(`SELECT "name" FROM "schema_migrations" ORDER BY "id" DESC LIMIT 1`)) as { name: string }[])[0].name;
      await h.ds.undoLastMigration({ transaction: 'each' });
    }
    try {
      const all = (await h.ds.query(`SELECT * FROM gateway_calls WHERE session_id = $1 ORDER BY turn_index`, [sessionId])) as Row[];
      for (const [k, row] of all.entries()) {
        expect(Array.from(decodeTokenArray(Int32Array, row.prompt_ids))).toEqual(Array.from(records.get(row.id)?.payload.promptIds ?? []));
        expect((JSON.parse(row.messages_json) as unknown[]).length).toBe(2 + 2 * k);
        expect(row).not.toHaveProperty('prompt_prefix_tokens');
      }
    } finally {
      await h.ds.runMigrations({ transaction: 'each' });
    }
  });
});
