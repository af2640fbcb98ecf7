import { describe, expect, it } from 'vitest';
import { chatFormatFromFiles, tinyChatFormat, type ChatFormat } from './chat-format';
import { appendFingerprint, canonicalJson, fingerprintMessages, planContinuation, type ContinuationPlan } from './continuation';
import { readHfTokenizerFiles } from './hf-tokenizer';
import { loadGolden, QWEN3_DIR, randomText, rng } from './testing/qwen3';
import { parseAssistantOutput } from './tool-calls';
import type { ChatMessage, ToolDefinition } from './types';

const qwen3 = chatFormatFromFiles(readHfTokenizerFiles(QWEN3_DIR), 'qwen3');
const tiny = tinyChatFormat();
const golden = loadGolden();

const tools: ToolDefinition[] = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather for a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
  {
    type: 'function',
    function: { name: 'search', description: 'Web search', parameters: { type: 'object', properties: { q: { type: 'string' } } } },
  },
];

/** One LLM call as the gateway records it. */
interface Call {
  /** What the gateway stores (the rendered history). */
  messages: ChatMessage[];
  /** What the client sent (its own copies of earlier replies). */
  client: ChatMessage[];
  promptIds: number[];
  outputIds: number[];
  reply: ChatMessage;
}

/** The gateway's side of a call: the model "writes" `output`, the reply is parsed from it. */
function respond(
  f: ChatFormat,
  messages: ChatMessage[],
  promptIds: number[],
  output: string,
  opts: { eos?: number | null; client?: ChatMessage[] } = {},
): Call {
  const eos = opts.eos === undefined ? f.tokenizer.tokenToId('<|im_end|>') : opts.eos;
  const outputIds = [...f.tokenizer.encode(output), ...(eos === null || eos === undefined ? [] : [eos])];
  const parsed = parseAssistantOutput(f.tokenizer.decode(outputIds, { skipSpecialTokens: true }), { format: f.toolCallFormat, tools });
  const reply: ChatMessage = { role: 'assistant', content: parsed.content };
  if (parsed.toolCalls.length)
    reply.tool_calls = parsed.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
  if (parsed.reasoning !== undefined) reply.reasoning_content = parsed.reasoning;
  return { messages, client: opts.client ?? messages, promptIds, outputIds, reply };
}

/** What a typical OpenAI client sends back: no reasoning, arguments re-serialised compactly. */
function echo(reply: ChatMessage): ChatMessage {
  const out: ChatMessage = { role: 'assistant', content: reply.content ?? null };
  if (reply.tool_calls)
    out.tool_calls = reply.tool_calls.map((c) => ({
      ...c,
      function: { name: c.function.name, arguments: JSON.stringify(JSON.parse(c.function.arguments)) },
    }));
  return out;
}

function fresh(f: ChatFormat, messages: ChatMessage[], extra?: Record<string, unknown>): number[] {
  return f.tokenizer.encode(f.template.render(messages, { tools, addGenerationPrompt: true, extra }));
}

function next(
  f: ChatFormat,
  prev: Call,
  added: ChatMessage[],
  extra?: Record<string, unknown>,
): { plan: ContinuationPlan; messages: ChatMessage[]; client: ChatMessage[] } {
  const request = [...prev.client, echo(prev.reply), ...added];
  const plan = planContinuation({
    template: f.template,
    tokenizer: f.tokenizer,
    prevMessages: prev.messages,
    prevPromptIds: prev.promptIds,
    prevOutputIds: prev.outputIds,
    assistantMessage: prev.reply,
    newMessages: request,
    tools,
    extra,
  });
  // What the gateway stores as the call's messages: the rendered history when extending, the request when branching.
  return { plan, messages: plan.kind === 'extend' ? plan.messages : request, client: request };
}

/** The full re-render of a conversation with the stored replies (reasoning included). */
function fullRender(f: ChatFormat, history: ChatMessage[], extra?: Record<string, unknown>): number[] {
  return fresh(f, history, extra);
}

function expectExtend(plan: ContinuationPlan): Extract<ContinuationPlan, { kind: 'extend' }> {
  if (plan.kind !== 'extend') throw new Error(`expected extend, got branch ${plan.reason}: ${plan.detail}`);
  return plan;
}

const call = (name: string, args: string) => `<tool_call>\n{"name": "${name}", "arguments": ${args}}\n</tool_call>`;

describe('planContinuation: tiny byte-level format', () => {
  it('extends a multi-turn tool conversation; each prompt equals the full re-render', () => {
    const f = tiny;
    const history: ChatMessage[] = [
      { role: 'system', content: 'You are an agent.' },
      { role: 'user', content: 'Weather in Paris and Oslo?' },
    ];
    let prev = respond(
      f,
      [...history],
      fresh(f, history),
      `<think>\nTwo cities.\n</think>\n\nOn it.\n${call('get_weather', '{"city": "Paris"}')}\n${call('get_weather', '{"city": "Oslo"}')}`,
    );
    const steps: Array<{ added: ChatMessage[]; output: string }> = [
      {
        added: [
          { role: 'tool', tool_call_id: 'a', content: '{"temp": 21}' },
          { role: 'tool', tool_call_id: 'b', content: '{"temp": 3}' },
        ],
        output: 'Paris 21°C, Oslo 3°C.',
      },
      { added: [{ role: 'user', content: 'And Tokyo? 東京' }], output: call('search', '{"q": "Tokyo weather"}') },
      {
        added: [{ role: 'tool', tool_call_id: 'c', content: 'sunny, 28°C' }],
        output: '<think>\nfound it\n</think>\n\nTokyo: sunny, 28°C ☀️',
      },
      { added: [{ role: 'user', content: 'Thanks' }], output: 'You are welcome.' },
    ];
    let stored = [...history];
    for (const step of steps) {
      const { plan, messages, client } = next(f, prev, step.added);
      const ext = expectExtend(plan);
      stored = [...stored, prev.reply, ...step.added];
      expect(ext.promptIds).toEqual(fullRender(f, stored));
      expect(ext.messages).toEqual(stored);
      expect(ext.reusedTokens).toBe(prev.promptIds.length + prev.outputIds.length);
      expect(ext.cleanBoundary).toBe(true);
      expect(ext.appendedText.startsWith('\n<|im_start|>')).toBe(true); // the output ended with <|im_end|>
      expect(ext.text).toBe(f.template.render(stored, { tools, addGenerationPrompt: true }));
      // Handing in the previous rendering (kept from the previous plan) gives the same plan.
      const prevText = f.template.render(prev.messages, { tools, addGenerationPrompt: true });
      expect(
        planContinuation({
          template: f.template,
          tokenizer: f.tokenizer,
          prevMessages: prev.messages,
          prevPromptIds: prev.promptIds,
          prevOutputIds: prev.outputIds,
          assistantMessage: prev.reply,
          newMessages: client,
          tools,
          prevText,
        }),
      ).toEqual(ext);
      prev = respond(f, messages, ext.promptIds, step.output, { client });
    }
  });

  it('puts the end-of-turn token in the bridge when the output stopped without it', () => {
    const f = tiny;
    const history: ChatMessage[] = [{ role: 'user', content: 'Count' }];
    const prev = respond(f, history, fresh(f, history), '1, 2, 3, 4', { eos: null }); // stopped by length
    const tool: ChatMessage = { role: 'user', content: 'go on' };
    const ext = expectExtend(next(f, prev, [tool]).plan);
    expect(ext.appendedText.startsWith('<|im_end|>\n<|im_start|>user\ngo on')).toBe(true);
    expect(ext.appendedIds[0]).toBe(258);
    expect(ext.promptIds).toEqual(fullRender(f, [...history, prev.reply, tool]));
  });

  it('is exact on many random tool conversations (random unicode, several calls, tool results, user turns)', () => {
    const r = rng(11);
    for (let conv = 0; conv < 25; conv++) {
      const history: ChatMessage[] = r() < 0.7 ? [{ role: 'system', content: randomText(r, 30) }] : [];
      history.push({ role: 'user', content: randomText(r, 40) });
      let prev = respond(tiny, [...history], fresh(tiny, history), randomOutput(r));
      let stored = [...history];
      const turns = 2 + Math.floor(r() * 5);
      for (let t = 0; t < turns; t++) {
        const added: ChatMessage[] = prev.reply.tool_calls?.length
          ? prev.reply.tool_calls.map((c) => ({ role: 'tool' as const, tool_call_id: c.id, content: randomText(r, 30) }))
          : [{ role: 'user', content: randomText(r, 30) }];
        const { plan, messages, client } = next(tiny, prev, added);
        const ext = expectExtend(plan);
        stored = [...stored, prev.reply, ...added];
        expect(ext.promptIds).toEqual(fullRender(tiny, stored));
        prev = respond(tiny, messages, ext.promptIds, randomOutput(r), { eos: r() < 0.2 ? null : 258, client });
      }
    }
  });
});

/** A model output in the Hermes format: optional reasoning, optional content, 0..3 calls. */
function randomOutput(r: () => number, reasoning = r() < 0.5): string {
  const word = () =>
    randomText(r, 12)
      .replace(/[<>\n]/g, 'x')
      .trim() || 'w';
  let out = reasoning ? `<think>\n${word()} ${word()}\n</think>\n\n` : '';
  const calls = Math.floor(r() * 4);
  const content = calls === 0 || r() < 0.5 ? word() : '';
  out += content;
  for (let i = 0; i < calls; i++) {
    if (content || i > 0) out += '\n';
    const name = r() < 0.5 ? 'get_weather' : 'search';
    out += call(
      name,
      JSON.stringify(name === 'search' ? { q: word() } : { city: word() }, null, 1)
        .replace(/\n ?/g, ' ')
        .replace('{ ', '{')
        .replace(' }', '}'),
    );
  }
  return out;
}

describe('planContinuation: the real Qwen3 template and tokenizer', () => {
  it('matches transformers + Rust tokenizers ids for a tool follow-up (reference vectors)', () => {
    const c = golden.templates.find((t) => t.name === 'tools-no-system' && t.addGenerationPrompt && !('enable_thinking' in t.extra));
    expect(c).toBeDefined();
    const gm = c!.messages as unknown as ChatMessage[];
    const first = [gm[0]];
    const prompt = fresh(qwen3, first);
    const prev = respond(qwen3, first, prompt, 'Searching.\n' + call('search', '{"q": "cats"}'));
    const plan = planContinuation({
      template: qwen3.template,
      tokenizer: qwen3.tokenizer,
      prevMessages: first,
      prevPromptIds: prompt,
      prevOutputIds: prev.outputIds,
      assistantMessage: prev.reply,
      newMessages: [gm[0], { ...gm[1], tool_calls: prev.reply.tool_calls }, gm[2]],
      tools,
    });
    const ext = expectExtend(plan);
    // The reference rendering used the golden conversation's own tools.
    const goldenTools = c!.tools as unknown as ToolDefinition[];
    const ref = planContinuation({
      template: qwen3.template,
      tokenizer: qwen3.tokenizer,
      prevMessages: first,
      prevPromptIds: qwen3.tokenizer.encode(qwen3.template.render(first, { tools: goldenTools, addGenerationPrompt: true })),
      prevOutputIds: prev.outputIds,
      assistantMessage: prev.reply,
      newMessages: [gm[0], { ...gm[1], tool_calls: prev.reply.tool_calls }, gm[2]],
      tools: goldenTools,
    });
    expect(expectExtend(ref).promptIds).toEqual(c!.ids);
    expect(ext.reusedTokens).toBe(prompt.length + prev.outputIds.length);
  });

  it('extends a thinking tool loop (reasoning kept after the last user query), equal to the full re-render', () => {
    const f = qwen3;
    const history: ChatMessage[] = [
      { role: 'system', content: 'You are a weather agent.' },
      { role: 'user', content: 'Weather in Paris, then in Tokyo?' },
    ];
    let prev = respond(
      f,
      [...history],
      fresh(f, history),
      `<think>\nParis first.\n</think>\n\n${call('get_weather', '{"city": "Paris"}')}`,
    );
    let stored = [...history];
    const steps: Array<{ added: ChatMessage[]; output: string }> = [
      {
        added: [{ role: 'tool', tool_call_id: 'x', content: '{"temp": 21}' }],
        output: `<think>\nNow Tokyo.\n</think>\n\nParis is 21°C.\n${call('get_weather', '{"city": "Tokyo"}')}`,
      },
      {
        added: [{ role: 'tool', tool_call_id: 'y', content: '{"temp": 28}' }],
        output: '<think>\nDone.\n</think>\n\nParis 21°C, Tokyo 28°C.',
      },
    ];
    for (const step of steps) {
      const { plan, messages, client } = next(f, prev, step.added);
      const ext = expectExtend(plan);
      stored = [...stored, prev.reply, ...step.added];
      expect(ext.promptIds).toEqual(fullRender(f, stored));
      expect(ext.appendedIds.slice(0, 4)).toEqual([198, 151644, 872, 198]); // "\n<|im_start|>user\n"
      prev = respond(f, messages, ext.promptIds, step.output, { client });
    }
  });

  it('detects the Qwen3 think-dropping rewrite at a new user turn and reports a branch', () => {
    const f = qwen3;
    const history: ChatMessage[] = [{ role: 'user', content: 'What is 2+2?' }];
    const prev = respond(f, history, fresh(f, history), '<think>\nSimple arithmetic.\n</think>\n\n4');
    const { plan } = next(f, prev, [{ role: 'user', content: 'And 3+3?' }]);
    expect(plan).toMatchObject({ kind: 'branch', reason: 'template-rewrites-history' });
    expect((plan as { detail: string }).detail).toMatch(/drops the reply's reasoning/);
    // The earlier reasoning is gone from the new rendering: what the model saw is not a prefix of it.
    const rendered = f.template.render([...history, prev.reply, { role: 'user', content: 'And 3+3?' }], {
      tools,
      addGenerationPrompt: true,
    });
    expect(rendered).not.toContain('Simple arithmetic.');
  });

  it('reports the rewrite as such when an earlier turn is rewritten (reasoning dropped before the previous prompt)', () => {
    const f = qwen3;
    // Call 2 was prompted inside a tool loop (reasoning of turn 1 kept); call 3 adds a user turn.
    const history: ChatMessage[] = [{ role: 'user', content: 'Find cats' }];
    const c1 = respond(f, history, fresh(f, history), `<think>\nsearch\n</think>\n\n${call('search', '{"q": "cats"}')}`);
    const s2 = next(f, c1, [{ role: 'tool', tool_call_id: 't', content: 'cats!' }]);
    const c2 = respond(f, s2.messages, expectExtend(s2.plan).promptIds, '<think>\nanswer\n</think>\n\nCats found.', { client: s2.client });
    const s3 = next(f, c2, [{ role: 'user', content: 'Dogs?' }]);
    expect(s3.plan).toMatchObject({ kind: 'branch', reason: 'template-rewrites-history' });
  });

  it('branches in non-thinking mode: the empty think block of the generation prompt is not kept in history', () => {
    const f = qwen3;
    const extra = { enable_thinking: false };
    const history: ChatMessage[] = [{ role: 'user', content: 'Find cats' }];
    const prompt = fresh(f, history, extra);
    expect(f.tokenizer.decode(prompt).endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
    const c1 = respond(f, history, prompt, call('search', '{"q": "cats"}'));
    expect(next(f, c1, [{ role: 'tool', tool_call_id: 't', content: 'cats!' }], extra).plan).toMatchObject({
      kind: 'branch',
      reason: 'template-rewrites-history',
    });
  });

  it('handles an output that ended with <|endoftext|> instead of <|im_end|>, or with no stop token', () => {
    const f = qwen3;
    const history: ChatMessage[] = [{ role: 'user', content: 'Find cats' }];
    const out = `<think>\nok\n</think>\n\n${call('search', '{"q": "cats"}')}`;
    const tool: ChatMessage = { role: 'tool', tool_call_id: 't', content: 'cats!' };
    const c1 = respond(f, history, fresh(f, history), out, { eos: 151643 });
    const e1 = expectExtend(next(f, c1, [tool]).plan);
    expect(e1.droppedStopId).toBe(true);
    expect(e1.reusedTokens).toBe(c1.promptIds.length + c1.outputIds.length - 1);
    expect(e1.promptIds).toEqual(fullRender(f, [...history, c1.reply, tool]));
    const c2 = respond(f, history, fresh(f, history), out, { eos: null });
    const e2 = expectExtend(next(f, c2, [tool]).plan);
    expect(e2.droppedStopId).toBe(false);
    expect(e2.appendedIds[0]).toBe(151645);
    expect(e2.promptIds).toEqual(fullRender(f, [...history, c2.reply, tool]));
  });

  it('extends past text that is not NFC (the tokenizer normalises it; the check compares normalised text)', () => {
    const f = qwen3;
    const history: ChatMessage[] = [{ role: 'user', content: 'Read cafe\u0301.txt' }];
    const c1 = respond(f, history, fresh(f, history), `<think>\nread it\n</think>\n\n${call('search', '{"q": "cafe\u0301"}')}`);
    const tool: ChatMessage = { role: 'tool', tool_call_id: 't', content: 'Cre\u0300me bru\u0302le\u0301e' };
    const s2 = next(f, c1, [tool]);
    expect(expectExtend(s2.plan).promptIds).toEqual(fullRender(f, [...history, c1.reply, tool]));
    const c2 = respond(f, s2.messages, expectExtend(s2.plan).promptIds, '<think>\nok\n</think>\n\nDone.', { client: s2.client });
    expect(next(f, c2, [{ role: 'user', content: 'x' }]).plan.kind).toBe('branch'); // Qwen3 drops the reasoning at a user turn
  });

  it('is exact on random thinking tool loops; every new user turn is a branch', () => {
    const f = qwen3;
    const r = rng(5);
    let extends_ = 0;
    let branches = 0;
    for (let conv = 0; conv < 12; conv++) {
      const history: ChatMessage[] = [
        { role: 'system', content: randomText(r, 20).replace(/<|>/g, '') || 's' },
        { role: 'user', content: `ask ${randomText(r, 30)}` },
      ];
      let prev = respond(f, [...history], fresh(f, history), randomOutput(r, true));
      let stored = [...history];
      for (let t = 0; t < 4; t++) {
        const toolTurn = (prev.reply.tool_calls?.length ?? 0) > 0;
        const added: ChatMessage[] = toolTurn
          ? prev.reply.tool_calls!.map((c) => ({ role: 'tool' as const, tool_call_id: c.id, content: randomText(r, 30) }))
          : [{ role: 'user', content: `more ${randomText(r, 20)}` }];
        const { plan, messages, client } = next(f, prev, added);
        stored = [...stored, prev.reply, ...added];
        if (toolTurn) {
          expect(expectExtend(plan).promptIds).toEqual(fullRender(f, stored));
          extends_++;
          prev = respond(f, messages, (plan as { promptIds: number[] }).promptIds, randomOutput(r, true), { client });
        } else {
          expect(plan).toMatchObject({ kind: 'branch', reason: 'template-rewrites-history' });
          branches++;
          // The gateway starts a new branch from a fresh encoding of the request.
          stored = [...messages];
          prev = respond(f, messages, fresh(f, messages), randomOutput(r, true));
        }
      }
    }
    expect(extends_).toBeGreaterThan(10);
    expect(branches).toBeGreaterThan(3);
  });
});

describe('planContinuation: what is not an extension', () => {
  const f = tiny;
  const history: ChatMessage[] = [
    { role: 'system', content: 'S' },
    { role: 'user', content: 'Find cats' },
  ];
  const c1 = respond(f, history, fresh(f, history), call('search', '{"q": "cats"}'));
  const tool: ChatMessage = { role: 'tool', tool_call_id: 't', content: 'cats!' };
  const base = {
    template: f.template,
    tokenizer: f.tokenizer,
    prevMessages: history,
    prevPromptIds: c1.promptIds,
    prevOutputIds: c1.outputIds,
    assistantMessage: c1.reply,
    tools,
  };

  it('an edited earlier user message', () => {
    const plan = planContinuation({ ...base, newMessages: [history[0], { role: 'user', content: 'Find dogs' }, echo(c1.reply), tool] });
    expect(plan).toMatchObject({ kind: 'branch', reason: 'not-an-extension' });
  });

  it('a changed system prompt, truncated history, or no reply in place', () => {
    expect(planContinuation({ ...base, newMessages: [{ role: 'system', content: 'S2' }, history[1], echo(c1.reply), tool] })).toMatchObject(
      { reason: 'not-an-extension' },
    );
    expect(planContinuation({ ...base, newMessages: [history[1], echo(c1.reply), tool] })).toMatchObject({ reason: 'not-an-extension' });
    expect(planContinuation({ ...base, newMessages: [...history] })).toMatchObject({ reason: 'not-an-extension' });
    expect(planContinuation({ ...base, newMessages: [...history, { role: 'user', content: 'hm' }] })).toMatchObject({
      reason: 'assistant-mismatch',
    });
  });

  it('an edited reply, or a reply echoed with a different reasoning', () => {
    const edited = {
      ...echo(c1.reply),
      tool_calls: [{ id: c1.reply.tool_calls![0].id, type: 'function' as const, function: { name: 'search', arguments: '{"q": "dogs"}' } }],
    };
    expect(planContinuation({ ...base, newMessages: [...history, edited, tool] })).toMatchObject({ reason: 'assistant-mismatch' });
    expect(
      planContinuation({ ...base, newMessages: [...history, { ...echo(c1.reply), reasoning_content: 'made up' }, tool] }),
    ).toMatchObject({ reason: 'assistant-mismatch' });
  });

  it('accepts the reply echoed with reordered/compacted arguments and without reasoning', () => {
    const echoed = echo(c1.reply);
    echoed.tool_calls = echoed.tool_calls!.map((c) => ({ ...c, function: { ...c.function, arguments: '{ "q" : "cats" }' } }));
    expect(planContinuation({ ...base, newMessages: [...history, echoed, tool] }).kind).toBe('extend');
  });

  it('accepts the same tools written with another key order (rendered as the previous call wrote them)', () => {
    const reordered = tools.map((t) => JSON.parse(canonicalJson(t)) as ToolDefinition);
    expect(JSON.stringify(reordered)).not.toBe(JSON.stringify(tools));
    const plan = planContinuation({ ...base, newMessages: [...history, echo(c1.reply), tool], tools: reordered, prevTools: tools });
    expect(expectExtend(plan).promptIds).toEqual(fullRender(f, [...history, c1.reply, tool]));
  });

  it('changed tools or template variables', () => {
    expect(
      planContinuation({ ...base, newMessages: [...history, echo(c1.reply), tool], tools: tools.slice(0, 1), prevTools: tools }),
    ).toMatchObject({ reason: 'tools-changed' });
    expect(planContinuation({ ...base, newMessages: [...history, echo(c1.reply), tool], extra: { x: 1 }, prevExtra: {} })).toMatchObject({
      reason: 'options-changed',
    });
  });

  it('prompt ids that are not the rendering of the previous messages', () => {
    const plan = planContinuation({ ...base, prevPromptIds: c1.promptIds.slice(1), newMessages: [...history, echo(c1.reply), tool] });
    expect(plan).toMatchObject({ kind: 'branch', reason: 'prompt-mismatch' });
    // Without the check the caller vouches for the prompt.
    expect(
      planContinuation({
        ...base,
        prevPromptIds: c1.promptIds.slice(1),
        newMessages: [...history, echo(c1.reply), tool],
        verifyPrevPrompt: false,
      }).kind,
    ).toBe('extend');
  });

  it('an output the template cannot reproduce (whitespace the parser drops)', () => {
    const odd = respond(f, history, c1.promptIds, `${call('search', '{"q": "cats"}')}  \n`);
    const plan = planContinuation({
      ...base,
      prevOutputIds: odd.outputIds,
      assistantMessage: odd.reply,
      newMessages: [...history, echo(odd.reply), tool],
    });
    expect(plan).toMatchObject({ kind: 'branch', reason: 'assistant-render-mismatch' });
  });
});

describe('fingerprintMessages', () => {
  const msgs: ChatMessage[] = [
    { role: 'system', content: 'S' },
    { role: 'user', content: [{ type: 'text', text: 'hi' }] },
    {
      role: 'assistant',
      content: null,
      reasoning_content: 'r',
      tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{"a": 1, "b": [1, 2]}' } }],
    },
    { role: 'tool', tool_call_id: 'c', content: 'ok' },
  ];

  it('gives one hash per prefix length, sharing prefixes', () => {
    const fp = fingerprintMessages(msgs, tools);
    expect(fp).toHaveLength(5);
    expect(new Set(fp).size).toBe(5);
    expect(fingerprintMessages(msgs.slice(0, 2), tools)).toEqual(fp.slice(0, 3));
  });

  it('appendFingerprint extends the last prefix hash by one message', () => {
    const fp = fingerprintMessages(msgs, tools);
    expect(appendFingerprint(fp[3], msgs[3])).toBe(fp[4]);
    expect(appendFingerprint(fingerprintMessages([], tools)[0], msgs[0])).toBe(fp[1]);
  });

  it('is stable across key order, argument spacing, content shape and reasoning', () => {
    const same: ChatMessage[] = [
      { content: 'S', role: 'system' } as ChatMessage,
      { role: 'user', content: 'hi' },
      {
        tool_calls: [{ type: 'function', id: 'c', function: { arguments: '{"b":[1,2],"a":1}', name: 'f' } }],
        role: 'assistant',
        content: '',
      },
      { content: 'ok', tool_call_id: 'c', role: 'tool' },
    ];
    const reorderedTools = tools.map((t) => JSON.parse(canonicalJson(t)) as ToolDefinition);
    expect(fingerprintMessages(same, reorderedTools)).toEqual(fingerprintMessages(msgs, tools));
  });

  it('changes with tools, extra variables and any message edit', () => {
    const fp = fingerprintMessages(msgs, tools);
    expect(fingerprintMessages(msgs, tools.slice(1))[0]).not.toBe(fp[0]);
    expect(fingerprintMessages(msgs, tools, { enable_thinking: false })[0]).not.toBe(fp[0]);
    const edited = msgs.map((m, i) => (i === 1 ? { ...m, content: 'hi!' } : m));
    const fe = fingerprintMessages(edited, tools);
    expect(fe[1]).toBe(fp[1]);
    expect(fe[2]).not.toBe(fp[2]);
    expect(fe[4]).not.toBe(fp[4]);
  });

  it('finds the call a request extends: the stored fingerprint of messages + reply is a prefix hash of the new request', () => {
    const h = [msgs[0], msgs[1]];
    const reply = msgs[2];
    const stored = fingerprintMessages([...h, reply], tools)[3];
    const request = [...h, { ...reply, reasoning_content: undefined }, msgs[3], { role: 'user' as const, content: 'next' }];
    expect(fingerprintMessages(request, tools).indexOf(stored)).toBe(3);
  });
});
