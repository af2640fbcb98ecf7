/**
 * A black-box agent: an ordinary program on the official `openai` SDK that knows nothing about
 * Anvil. Point it at a gateway session and it solves an arithmetic task with a calculator tool:
 * it sends the tool, executes every tool call the model returns, sends the results back, and
 * stops when the model answers without calling a tool (or after --turns calls).
 *
 *   npx tsx examples/calculator-agent/main.ts --base-url <session baseUrl> [--api-key K] [--turns 6] [--max-tokens 48] [--model anvil-tiny] [--task T]
 *   (or OPENAI_BASE_URL / OPENAI_API_KEY / AGENT_MODEL in the environment)
 *
 * The last line of its output is a JSON summary: {calls, toolCalls, finalAnswer}.
 */
import OpenAI from 'openai';
import { evaluate } from './calculator';

function flag(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? undefined : process.argv[i + 1];
}

const baseURL = flag('base-url') ?? process.env.OPENAI_BASE_URL;
// The per-session base URL carries the secret itself; a key is still required by the SDK.
const apiKey = flag('api-key') ?? process.env.OPENAI_API_KEY ?? 'unused';
const model = flag('model') ?? process.env.AGENT_MODEL ?? 'anvil-tiny';
const maxTurns = Number(flag('turns') ?? 6);
const maxTokens = Number(flag('max-tokens') ?? 48);
const task = flag('task') ?? 'What is (17 * 23) + 4? Use the calculator.';

const tools: OpenAI.Chat.ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'calculator',
      description: 'Evaluates an arithmetic expression (+ - * / and parentheses).',
      parameters: { type: 'object', properties: { expression: { type: 'string' } }, required: ['expression'] },
    },
  },
];

/** Runs one tool call; errors become the tool's answer, as agents usually do. */
function runTool(call: OpenAI.Chat.ChatCompletionMessageToolCall): string {
  if (call.type !== 'function' || call.function.name !== 'calculator')
    return `error: unknown tool ${call.type === 'function' ? call.function.name : call.type}`;
  try {
    const args = JSON.parse(call.function.arguments) as { expression?: unknown };
    if (typeof args.expression !== 'string') return 'error: expression must be a string';
    return String(evaluate(args.expression));
  } catch (err) {
    return `error: ${(err as Error).message}`;
  }
}

async function main(): Promise<void> {
  if (!baseURL) throw new Error('--base-url (or OPENAI_BASE_URL) is required');
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 2 });
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
    { role: 'system', content: 'You are a careful assistant. Use the calculator for arithmetic.' },
    { role: 'user', content: task },
  ];
  let calls = 0;
  let toolCalls = 0;
  let finalAnswer: string | null = null;
  while (calls < maxTurns) {
    const completion = await client.chat.completions.create({ model, messages, tools, max_tokens: maxTokens, temperature: 1, seed: calls });
    calls++;
    const message = completion.choices[0].message;
    messages.push(message);
    if (!message.tool_calls?.length) {
      // An untrained model rarely calls tools: its text is the answer. Keep the episode going a
      // little so the trajectory has several turns, as a real agent loop nudging the model would.
      finalAnswer = message.content;
      if (calls >= Math.min(3, maxTurns)) break;
      messages.push({ role: 'user', content: 'Please use the calculator tool and give the final number.' });
      continue;
    }
    for (const call of message.tool_calls) {
      toolCalls++;
      messages.push({ role: 'tool', tool_call_id: call.id, content: runTool(call) });
    }
  }
  console.log(JSON.stringify({ calls, toolCalls, finalAnswer }));
}

main().catch((err: unknown) => {
  console.error(`calculator-agent: ${(err as Error).message}`);
  process.exit(1);
});
