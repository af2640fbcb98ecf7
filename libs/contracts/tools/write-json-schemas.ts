// Regenerates libs/contracts/schemas/*.json from the zod source; a unit test fails when the
// committed files drift from it.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { apiJsonSchemas, eventJsonSchemas } from '../src/json-schema';

const dir = join(__dirname, '..', 'schemas');
for (const [sub, schemas] of [
  ['events', eventJsonSchemas()],
  ['api', apiJsonSchemas()],
] as const) {
  mkdirSync(join(dir, sub), { recursive: true });
  for (const [name, schema] of Object.entries(schemas)) {
    writeFileSync(join(dir, sub, `${name}.json`), JSON.stringify(schema, null, 2) + '\n');
  }
}
console.log(`wrote JSON Schemas to ${dir}`);
