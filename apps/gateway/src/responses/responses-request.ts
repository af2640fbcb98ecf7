import { z } from 'zod';

/**
 * The OpenAI Responses API request (POST /v1/responses) as the official SDKs, the openai-agents
 * SDK and Codex CLI send it. The fields Anvil acts on are validated here; input items and tools
 * are validated one by one (responses-input.ts), so an error names the item at fault. Fields with
 * no effect on a self-hosted policy (reasoning effort, text verbosity, include, prompt_cache_key,
 * service_tier, truncation, user, client_metadata, ...) are accepted and ignored, as chat
 * completions ignores its own.
 */
export const responsesRequestSchema = z.looseObject({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(z.unknown())], { error: 'must be a string or an array of input items' }),
  instructions: z.string().nullable().optional(),
  tools: z.array(z.unknown()).max(128).nullable().optional(),
  tool_choice: z
    .union([z.enum(['none', 'auto', 'required']), z.looseObject({ type: z.string(), name: z.string().optional() })], {
      error: 'must be "none", "auto", "required" or {"type": "function", "name": ...}',
    })
    .nullable()
    .optional(),
  parallel_tool_calls: z.boolean().nullable().optional(),
  max_output_tokens: z.number().int().positive().nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().gt(0).max(1).nullable().optional(),
  previous_response_id: z.string().min(1).max(64).nullable().optional(),
  store: z.boolean().nullable().optional(),
  /** OpenAI's limit: 16 pairs, keys up to 64 characters, values up to 512. */
  metadata: z.record(z.string().max(64), z.string().max(512)).nullable().optional(),
  stream: z.boolean().nullable().optional(),
  /** Served in the foreground only: a background response would need a job store. */
  background: z.literal(false, { error: 'background responses are not supported' }).nullable().optional(),
  /** Conversations objects are not kept: previous_response_id chains a conversation instead. */
  conversation: z.null({ error: 'conversation objects are not supported; chain responses with previous_response_id' }).optional(),
});
export type ResponsesRequest = z.infer<typeof responsesRequestSchema>;

const text = z.string();
/** Content parts the policy can read: text only (images, files and audio need a model that reads them). */
export const inputPartSchema = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('input_text'), text }),
  z.looseObject({ type: z.literal('output_text'), text }),
  z.looseObject({ type: z.literal('refusal'), refusal: text }),
]);
export const TEXT_PART_TYPES = ['input_text', 'output_text', 'refusal'];

export const messageItemSchema = z.looseObject({
  type: z.literal('message').optional(),
  role: z.enum(['user', 'system', 'developer', 'assistant']),
  content: z.union([z.string(), z.array(z.unknown())]),
});
export const functionCallItemSchema = z.looseObject({
  type: z.literal('function_call'),
  call_id: z.string().min(1).max(256),
  name: z.string().min(1).max(256),
  arguments: z.string(),
});
export const functionCallOutputItemSchema = z.looseObject({
  type: z.literal('function_call_output'),
  call_id: z.string().min(1).max(256),
  output: z.union([z.string(), z.array(z.unknown())]),
});
export const reasoningItemSchema = z.looseObject({
  type: z.literal('reasoning'),
  summary: z.array(z.looseObject({ type: z.string(), text: z.string() })).optional(),
  content: z
    .array(z.looseObject({ type: z.string(), text: z.string() }))
    .nullable()
    .optional(),
  encrypted_content: z.string().nullable().optional(),
});

export const functionToolSchema = z.looseObject({
  type: z.literal('function'),
  name: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'must be 1-64 letters, digits, underscores, dots or dashes'),
  description: z.string().nullable().optional(),
  parameters: z.record(z.string(), z.unknown()).nullable().optional(),
  strict: z.boolean().nullable().optional(),
});
