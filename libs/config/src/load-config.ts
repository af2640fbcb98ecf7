import { z } from 'zod';

/**
 * Environment validation for every service: the whole environment is checked at once and
 * every problem is reported together, so an operator fixes a deployment in one round trip
 * instead of one crash per missing variable.
 */
export class ConfigError extends Error {
  constructor(
    readonly service: string,
    readonly problems: string[],
  ) {
    super(
      `${service}: invalid configuration (${problems.length} problem${problems.length === 1 ? '' : 's'}):\n${problems.map((p) => `  - ${p}`).join('\n')}`,
    );
    this.name = 'ConfigError';
  }
}

/** Rules across fields of serviceBaseEnv: Kafka brokers are required unless the bus is in-process. */
function crossFieldProblems(schema: z.ZodObject, env: NodeJS.ProcessEnv): string[] {
  const shape = schema.shape as Record<string, unknown>;
  if (!('KAFKA_BROKERS' in shape)) return [];
  const busKind = 'EVENT_BUS_KIND' in shape ? (env.EVENT_BUS_KIND ?? 'kafka') : 'kafka';
  return busKind !== 'memory' && !(env.KAFKA_BROKERS ?? '').trim() ? ['KAFKA_BROKERS: is required (comma-separated host:port list)'] : [];
}

export function loadConfig<S extends z.ZodObject>(service: string, schema: S, env: NodeJS.ProcessEnv = process.env): z.infer<S> {
  const result = schema.safeParse(env);
  const crossField = crossFieldProblems(schema, env);
  if (result.success && crossField.length === 0) return result.data;
  const issues = result.success ? [] : result.error.issues;
  const problems = issues.map((issue) => {
    const name = issue.path.map(String).join('.') || '(environment)';
    const given = issue.path.length === 1 ? env[String(issue.path[0])] : undefined;
    // Never echo values: a malformed secret must not end up in logs.
    return given === undefined ? `${name}: ${issue.message}` : `${name}: ${issue.message} (value present but rejected)`;
  });
  throw new ConfigError(service, [...problems, ...crossField]);
}

/**
 * For main.ts: validate or exit non-zero with the full list on stderr. Exit code 78 is
 * EX_CONFIG from sysexits.h, so supervisors can tell bad config from a crash.
 */
export function loadConfigOrExit<S extends z.ZodObject>(service: string, schema: S, env: NodeJS.ProcessEnv = process.env): z.infer<S> {
  try {
    return loadConfig(service, schema, env);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(78);
    }
    throw err;
  }
}
