import { z } from 'zod';
import { EVENTS, type EventType } from './events/registry';
import { generateRequestSchema, generateResponseSchema } from './api/generate';
import {
  budgetSpentRequestSchema,
  budgetSpentResponseSchema,
  closeSessionsRequestSchema,
  closeSessionsResponseSchema,
  createSessionRequestSchema,
  createSessionResponseSchema,
  createSessionsRequestSchema,
  createSessionsResponseSchema,
  sessionCallsSchema,
  sessionStateSchema,
} from './api/sessions';

/**
 * JSON Schema (draft 2020-12) of every event, generated from the same zod source, for
 * consumers in other languages. A typed array appears as a blob reference into the
 * frame's binary section (see codec/binary-frame.ts for the byte layout).
 */
function blobRef(dtype: string) {
  return {
    type: 'object',
    description: `typed array (${dtype}, little-endian) stored in the frame's binary section`,
    properties: { $bin: { type: 'integer', minimum: 0, description: 'index into header.blobs' } },
    required: ['$bin'],
    additionalProperties: false,
    'x-anvil-dtype': dtype,
  };
}

function toJsonSchema(schema: z.ZodType) {
  return z.toJSONSchema(schema, {
    target: 'draft-2020-12',
    unrepresentable: 'any',
    io: 'input',
    override: (ctx) => {
      const meta = z.globalRegistry.get(ctx.zodSchema) as { anvilBinary?: string } | undefined;
      if (meta?.anvilBinary) {
        for (const k of Object.keys(ctx.jsonSchema)) delete (ctx.jsonSchema as Record<string, unknown>)[k];
        Object.assign(ctx.jsonSchema, blobRef(meta.anvilBinary));
      }
    },
  }) as Record<string, unknown> & { title?: string };
}

export function eventJsonSchemas(): Record<string, Record<string, unknown>> {
  const out: Record<string, Record<string, unknown>> = {};
  for (const type of Object.keys(EVENTS) as EventType[]) {
    const entry = EVENTS[type];
    for (const [version, schema] of Object.entries(entry.versions)) {
      const payload = toJsonSchema(schema as z.ZodType);
      delete payload.$schema;
      out[`${type}.v${version}`] = {
        $schema: 'https://json-schema.org/draft/2020-12/schema',
        $id: `https://anvil.dev/schemas/events/${type}.v${version}.json`,
        title: `${type} v${version}`,
        description: `Envelope of ${type} version ${version}, published on ${entry.topic}, encoded as an ANV1 frame.`,
        type: 'object',
        properties: {
          id: { type: 'string', minLength: 1, maxLength: 128, description: 'event id; consumers are idempotent by it' },
          type: { const: type },
          version: { const: Number(version) },
          occurredAt: { type: 'number', description: 'ms since epoch' },
          key: { type: 'string', minLength: 1, description: 'partition key' },
          producer: { type: 'string' },
          payload,
        },
        required: ['id', 'type', 'version', 'occurredAt', 'key', 'producer', 'payload'],
      };
    }
  }
  return out;
}

export function apiJsonSchemas(): Record<string, Record<string, unknown>> {
  return {
    'generate-request': toJsonSchema(generateRequestSchema),
    'generate-response': toJsonSchema(generateResponseSchema),
    'create-session-request': toJsonSchema(createSessionRequestSchema),
    'create-session-response': toJsonSchema(createSessionResponseSchema),
    'session-state': toJsonSchema(sessionStateSchema),
    'session-calls': toJsonSchema(sessionCallsSchema),
    'create-sessions-request': toJsonSchema(createSessionsRequestSchema),
    'create-sessions-response': toJsonSchema(createSessionsResponseSchema),
    'close-sessions-request': toJsonSchema(closeSessionsRequestSchema),
    'close-sessions-response': toJsonSchema(closeSessionsResponseSchema),
    'budget-spent-request': toJsonSchema(budgetSpentRequestSchema),
    'budget-spent-response': toJsonSchema(budgetSpentResponseSchema),
  };
}
