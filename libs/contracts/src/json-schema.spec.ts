import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { apiJsonSchemas, eventJsonSchemas } from './json-schema';
import { EVENTS } from './events/registry';

const dir = join(__dirname, '..', 'schemas');

describe('generated JSON Schemas', () => {
  it('exist for every event version and match the committed files', () => {
    const schemas = eventJsonSchemas();
    for (const [type, entry] of Object.entries(EVENTS)) {
      for (const version of Object.keys(entry.versions)) {
        const name = `${type}.v${version}`;
        expect(schemas[name], name).toBeDefined();
        const committed = JSON.parse(readFileSync(join(dir, 'events', `${name}.json`), 'utf8'));
        expect(committed, `${name}.json is stale: run npx nx run contracts:schemas`).toEqual(schemas[name]);
      }
    }
    for (const [name, schema] of Object.entries(apiJsonSchemas())) {
      expect(JSON.parse(readFileSync(join(dir, 'api', `${name}.json`), 'utf8')), name).toEqual(schema);
    }
  });

  it('describes typed arrays as blob references with their dtype', () => {
    const llm = eventJsonSchemas()['llm_call.recorded.v1'] as {
      properties: { payload: { properties: Record<string, Record<string, unknown>> } };
    };
    const props = llm.properties.payload.properties;
    expect(props.promptIds['x-anvil-dtype']).toBe('i32');
    expect(props.outputLogprobs['x-anvil-dtype']).toBe('f32');
    expect(props.outputVersions['x-anvil-dtype']).toBe('u32');
    expect(props.finishReason).toEqual(expect.objectContaining({ enum: ['stop', 'length', 'tool_calls', 'abort', 'content_filter'] }));
  });
});
