import { z } from 'zod';

/**
 * The Anthropic Messages API request (POST /v1/messages) as the anthropic SDKs, the Vercel AI
 * SDK's Anthropic provider and Claude Code send it. Content blocks and tools are validated one by
 * one (messages-input.ts), so an error names the block at fault. Fields with no effect on a
 * self-hosted policy (thinking budget, cache_control, context_management, output_config,
 * service_tier, container, mcp_servers, ...) are accepted and ignored.
 */
export const messagesRequestSchema = z.looseObject({
  model: z.string().min(1),
  max_tokens: z.number({ error: 'is required (an integer of at least 1)' }).int().positive(),
  messages: z.array(
    z.looseObject({
      // `system` mid-conversation: what Claude Code sends under its mid-conversation-system beta.
      role: z.enum(['user', 'assistant', 'system']),
      content: z.union([z.string(), z.array(z.unknown())], { error: 'must be a string or an array of content blocks' }),
    }),
  ),
  system: z
    .union([z.string(), z.array(z.unknown())])
    .nullable()
    .optional(),
  tools: z.array(z.unknown()).max(256).nullable().optional(),
  tool_choice: z
    .looseObject({
      type: z.enum(['auto', 'any', 'tool', 'none'], { error: 'must be auto, any, tool or none' }),
      name: z.string().optional(),
      disable_parallel_tool_use: z.boolean().optional(),
    })
    .nullable()
    .optional(),
  stop_sequences: z.array(z.string().min(1)).max(16).nullable().optional(),
  temperature: z.number().min(0).max(1).nullable().optional(),
  top_p: z.number().gt(0).max(1).nullable().optional(),
  top_k: z.number().int().min(0).nullable().optional(),
  metadata: z
    .looseObject({ user_id: z.string().max(512).nullable().optional() })
    .nullable()
    .optional(),
  stream: z.boolean().nullable().optional(),
});
export type MessagesRequest = z.infer<typeof messagesRequestSchema>;

/** POST /v1/messages/count_tokens: the same conversation, no sampling fields. */
export const countTokensRequestSchema = messagesRequestSchema
  .omit({ max_tokens: true, stop_sequences: true, temperature: true, top_p: true, top_k: true, stream: true, metadata: true })
  .extend({});
export type CountTokensRequest = z.infer<typeof countTokensRequestSchema>;

export const textBlockSchema = z.looseObject({ type: z.literal('text'), text: z.string() });
export const toolUseBlockSchema = z.looseObject({
  type: z.literal('tool_use'),
  id: z.string().min(1).max(256),
  name: z.string().min(1).max(256),
  input: z.record(z.string(), z.unknown(), { error: 'must be an object' }),
});
export const toolResultBlockSchema = z.looseObject({
  type: z.literal('tool_result'),
  tool_use_id: z.string().min(1).max(256),
  content: z.union([z.string(), z.array(z.unknown())]).optional(),
  is_error: z.boolean().nullable().optional(),
});
export const thinkingBlockSchema = z.looseObject({ type: z.literal('thinking'), thinking: z.string(), signature: z.string().optional() });

export const customToolSchema = z.looseObject({
  type: z.literal('custom').optional(),
  name: z.string().regex(/^[a-zA-Z0-9_-]{1,128}$/, 'must be 1-128 letters, digits, underscores or dashes'),
  description: z.string().optional(),
  input_schema: z.record(z.string(), z.unknown(), { error: 'must be a JSON Schema object' }),
});
