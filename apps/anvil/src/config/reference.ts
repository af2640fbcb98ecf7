/**
 * The configuration reference (docs/configuration.md), rendered from the run configuration's
 * schema: each knob's path, default, what it accepts (from the schema's own types and bounds) and
 * its `.describe()` text. `anvil config docs --write` regenerates the file; a unit test keeps the
 * committed file equal to what the schema renders, so the two cannot drift.
 */
import type { z } from 'zod';
import { runConfigSchema } from './run-config';

interface Row {
  knob: string;
  default: string;
  accepts: string;
  description: string;
}

type AnySchema = z.ZodType & { _zod: { def: Record<string, unknown> & { type: string } } };
const def = (s: AnySchema) => s._zod.def;

/** Unwraps default/prefault/optional wrappers: the inner schema, its default (if any) and whether it is optional. */
function unwrap(s: AnySchema): { inner: AnySchema; dflt: unknown; hasDefault: boolean; optional: boolean } {
  let inner = s;
  let dflt: unknown = undefined;
  let hasDefault = false;
  let optional = false;
  for (;;) {
    const d = def(inner);
    if (d.type === 'default' || d.type === 'prefault') {
      if (!hasDefault) dflt = d.defaultValue;
      hasDefault = d.type === 'default' || hasDefault;
      inner = d.innerType as AnySchema;
    } else if (d.type === 'optional') {
      optional = true;
      inner = d.innerType as AnySchema;
    } else return { inner, dflt, hasDefault, optional };
  }
}

const code = (s: string) => `\`${s}\``;

/** What a schema accepts, in a few words. */
function accepts(s: AnySchema): string {
  const d = def(s);
  switch (d.type) {
    case 'number':
      return numberRange(s);
    case 'string':
      return 'string';
    case 'boolean':
      return '`true` / `false`';
    case 'enum':
      return Object.values(d.entries as Record<string, string>)
        .map((v) => code(v))
        .join(', ');
    case 'literal':
      return (d.values as unknown[]).map((v) => code(JSON.stringify(v))).join(', ');
    case 'union': {
      const options = d.options as AnySchema[];
      // A discriminated union of objects (an agent, a verifier, a delay): name its kinds.
      const disc = d.discriminator as string | undefined;
      if (disc)
        return `object with \`${disc}\`: ${options
          .map((o) =>
            ((def(o).shape as Record<string, AnySchema>)[disc]._zod.def.values as unknown[]).map((v) => code(String(v))).join(', '),
          )
          .join(', ')}`;
      return options.map((o) => accepts(o)).join(' or ');
    }
    case 'array':
      return `list of ${accepts(d.element as AnySchema)}`;
    case 'record':
      return 'object';
    case 'object':
      return 'object';
    default:
      return d.type;
  }
}

/** A number's type and bounds from its checks (an integer's safe-integer format is no bound worth printing). */
function numberRange(s: AnySchema): string {
  const checks = (
    (def(s).checks ?? []) as { _zod: { def: { check: string; value?: number; inclusive?: boolean; format?: string } } }[]
  ).map((c) => c._zod.def);
  const int = checks.some((c) => c.check === 'number_format' && c.format === 'safeint');
  const lo = checks.find((c) => c.check === 'greater_than');
  const hi = checks.find((c) => c.check === 'less_than');
  const kind = int ? 'integer' : 'number';
  const low = lo ? (int && !lo.inclusive ? `≥ ${fmt((lo.value ?? 0) + 1)}` : `${lo.inclusive ? '≥' : '>'} ${fmt(lo.value ?? 0)}`) : null;
  const high = hi ? `${hi.inclusive ? '≤' : '<'} ${fmt(hi.value ?? 0)}` : null;
  return [kind, low, high].filter(Boolean).join(', ');
}

function fmt(v: number): string {
  if (Number.isInteger(v) && Math.abs(v) >= 10_000) return v.toLocaleString('en-US');
  return String(v);
}

function defaultText(v: unknown, hasDefault: boolean): string {
  if (!hasDefault) return '—';
  if (typeof v === 'number') return code(fmt(v));
  return code(JSON.stringify(v));
}

function rowsOf(shape: Record<string, AnySchema>, prefix: string, out: Row[], sections: { path: string; description: string }[]): void {
  for (const [key, schema] of Object.entries(shape)) {
    const path = prefix ? `${prefix}.${key}` : key;
    const { inner, dflt, hasDefault } = unwrap(schema);
    const d = def(inner);
    // A section (task, rollouts, ...): its knobs get rows of their own; objects that are values (an agent, a delay) stay one row.
    if (d.type === 'object' && def(schema).type === 'prefault') {
      sections.push({ path, description: schema.description ?? '' });
      rowsOf(d.shape as Record<string, AnySchema>, path, out, sections);
      continue;
    }
    out.push({ knob: code(path), default: defaultText(dflt, hasDefault), accepts: accepts(inner), description: schema.description ?? '' });
  }
}

/** The markdown of docs/configuration.md. */
export function renderConfigReference(): string {
  const rows: Row[] = [];
  const sections: { path: string; description: string }[] = [];
  rowsOf((runConfigSchema as unknown as { shape: Record<string, AnySchema> }).shape, '', rows, sections);
  const escape = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');
  const lines = [
    '# Run configuration reference',
    '',
    '<!-- Generated from apps/anvil/src/config/run-config.ts by `anvil config docs --write`; a unit test keeps it equal. Do not edit by hand. -->',
    '',
    'Every knob of `anvil train --config run.json` and `anvil stack up --config run.json`. A run configuration is a JSON',
    'object; every field is optional. Unknown fields and out-of-range values are refused before anything starts, every',
    'problem listed at once (exit 78). `anvil config check --config run.json` checks a file (and the files it names)',
    'and prints the configuration with every default filled in. Paths in the file (`model`, `task.set`,',
    '`task.agent.cwd`) are taken relative to the file. `ANVIL_SEED`, `ANVIL_MAIN_STEPS` and `ANVIL_DATA_DIR` override',
    '`seed`, `budget.steps` and `dataDir`.',
    '',
    `Sections: ${sections.map((s) => `\`${s.path}\` (${s.description})`).join(', ')}.`,
    '',
    '| knob | default | accepts | what it does |',
    '|---|---|---|---|',
    ...rows.map((r) => `| ${r.knob} | ${escape(r.default)} | ${escape(r.accepts)} | ${escape(r.description)} |`),
    '',
  ];
  return lines.join('\n');
}
