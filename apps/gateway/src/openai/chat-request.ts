import { z } from 'zod';
import { describeZodError } from '@anvil/service-kit';
import { GatewayError } from '../errors';

/**
 * The OpenAI chat-completions request, as the official SDKs send it. Unknown fields
 * (presence_penalty, user, metadata, ...) are accepted and ignored, as
 * vLLM does, so unmodified agents keep working; the fields Anvil acts on are validated.
 */
const textPart = z.object({ type: z.literal('text'), text: z.string() });

/** Names the first content part that is not a text part (images, audio and files need a model that reads them). */
function contentError(issue: { input?: unknown }): string {
  const parts = Array.isArray(issue.input) ? (issue.input as unknown[]) : [];
  const bad = parts.find((p) => !p || typeof p !== 'object' || (p as { type?: unknown }).type !== 'text');
  const type = bad && typeof bad === 'object' ? (bad as { type?: unknown }).type : undefined;
  if (typeof type === 'string') return `content part type \`${type.slice(0, 64)}\` is not supported; only \`text\` parts are`;
  return 'must be a string, null, or an array of {"type": "text", "text": string} parts';
}
const content = z
  .union([z.string(), z.array(textPart)], { error: contentError })
  .nullable()
  .optional();

const toolCall = z.object({
  id: z.string().min(1).max(256),
  type: z.literal('function').default('function'),
  function: z.object({ name: z.string().min(1).max(256), arguments: z.string() }),
});

export const chatMessageSchema = z.discriminatedUnion('role', [
  z.looseObject({ role: z.literal('system'), content, name: z.string().optional() }),
  z.looseObject({ role: z.literal('developer'), content, name: z.string().optional() }),
  z.looseObject({ role: z.literal('user'), content, name: z.string().optional() }),
  z.looseObject({
    role: z.literal('assistant'),
    content,
    name: z.string().optional(),
    tool_calls: z.array(toolCall).nullable().optional(),
    reasoning_content: z.string().nullable().optional(),
    reasoning: z.string().nullable().optional(),
  }),
  z.looseObject({ role: z.literal('tool'), content, tool_call_id: z.string().min(1).max(256) }),
]);

export const toolSchema = z.object({
  type: z.literal('function'),
  function: z.object({
    name: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'must be 1-64 letters, digits, underscores, dots or dashes'),
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
    strict: z.boolean().nullable().optional(),
  }),
});

export const toolChoiceSchema = z.union([
  z.enum(['none', 'auto', 'required']),
  z.object({ type: z.literal('function'), function: z.object({ name: z.string().min(1) }) }),
]);

/** OpenAI's limit: up to 4 stop sequences. */
export const MAX_STOP_STRINGS = 4;
const stop = z
  .union([z.string().min(1), z.array(z.string().min(1)).max(MAX_STOP_STRINGS)], {
    error: `must be a non-empty string or an array of at most ${MAX_STOP_STRINGS} non-empty strings`,
  })
  .nullable()
  .optional();

const sampling = {
  model: z.string().min(1),
  n: z.number().int().min(1).nullable().optional(),
  stop,
  max_tokens: z.number().int().positive().nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().gt(0).max(1).nullable().optional(),
  /** vLLM's extension; 0 or -1 = off. */
  top_k: z.number().int().min(-1).nullable().optional(),
  seed: z
    .number()
    .int()
    .min(-(2 ** 53))
    .max(2 ** 53)
    .nullable()
    .optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).nullable().optional(),
};

export const chatRequestSchema = z.looseObject({
  ...sampling,
  messages: z.array(chatMessageSchema).min(1),
  max_completion_tokens: z.number().int().positive().nullable().optional(),
  tools: z.array(toolSchema).max(128).nullable().optional(),
  tool_choice: toolChoiceSchema.nullable().optional(),
  /** false: at most one tool call per reply (a reply with more is returned as text, see buildAssistantReply). */
  parallel_tool_calls: z.boolean().nullable().optional(),
  logprobs: z.boolean().nullable().optional(),
  top_logprobs: z.number().int().min(0).max(20).nullable().optional(),
  /** vLLM's extension: template variables (enable_thinking, ...). */
  chat_template_kwargs: z.record(z.string(), z.unknown()).nullable().optional(),
});
export type ChatRequest = z.infer<typeof chatRequestSchema>;

export const completionRequestSchema = z.looseObject({
  ...sampling,
  /** A string, or token ids (one prompt per request: n covers several samples). */
  prompt: z.union([z.string(), z.array(z.string()).length(1), z.array(z.number().int().nonnegative()).min(1)]),
  logprobs: z.number().int().min(0).max(5).nullable().optional(),
  echo: z.boolean().nullable().optional(),
});
export type CompletionRequest = z.infer<typeof completionRequestSchema>;

/** A request that fails its schema, as the GatewayError naming the first bad field. */
export function describeSchemaError(error: z.ZodError): GatewayError {
  const { message, param } = describeZodError(error);
  return GatewayError.invalid(message, param);
}
