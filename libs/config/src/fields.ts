import { z } from 'zod';

/** Reusable env fields. Secrets have no defaults: a missing secret is a configuration error. */

export const port = (fallback: number) => z.coerce.number().int().min(0).max(65535).default(fallback);

export const KAFKA_BROKERS_REQUIRED = 'is required (comma-separated host:port list)';

/**
 * Comma-separated host:port list. May be left out only with EVENT_BUS_KIND=memory (loadConfig
 * reports it missing otherwise, together with every other problem).
 */
export const kafkaBrokers = () =>
  z
    .string()
    .optional()
    .transform((s) =>
      (s ?? '')
        .split(',')
        .map((b) => b.trim())
        .filter(Boolean),
    )
    .refine((list) => list.every((b) => /^[^:\s]+:\d{1,5}$/.test(b)), 'each broker must be host:port');

/** Which bus a service uses: Kafka (distributed) or the in-process bus (the embedded one-process default). */
export const eventBusKind = () => z.enum(['kafka', 'memory']).default('kafka');

/** A PostgreSQL server, or embedded PGlite: `pglite://<dir>` (persisted), `pglite://` or `memory` (in memory). */
export const databaseUrl = () =>
  z
    .string({ error: 'is required (postgres://user@host:port/db, pglite://<dir> or memory)' })
    .regex(/^(postgres(ql)?:\/\/\S+|pglite:\/\/\S*|memory)$/, 'must be a postgres:// URL, pglite://<dir> or memory');

export const httpUrl = () =>
  z
    .string({ error: 'is required (http(s) URL)' })
    .url('must be an http(s) URL')
    .regex(/^https?:\/\//, 'must be an http(s) URL');

export const secret = (minLength = 24) =>
  z
    .string({ error: `is required (a secret of at least ${minLength} characters)` })
    .min(minLength, `must be at least ${minLength} characters`)
    .refine((s) => !/^(changeme|secret|password|test)$/i.test(s), 'must not be a placeholder value');

export const logLevel = () => z.enum(['debug', 'info', 'warn', 'error']).default('info');

export const optionalUrl = () => z.string().url('must be a URL').optional();

export const positiveInt = (fallback: number) => z.coerce.number().int().positive().default(fallback);

/** The environment every distributed service shares. */
export const serviceBaseEnv = {
  EVENT_BUS_KIND: eventBusKind(),
  KAFKA_BROKERS: kafkaBrokers(),
  DATABASE_URL: databaseUrl(),
  LOG_LEVEL: logLevel(),
  OTEL_EXPORTER_OTLP_ENDPOINT: optionalUrl(),
  SHUTDOWN_TIMEOUT_MS: positiveInt(15_000),
  KAFKA_TOPIC_PREFIX: z
    .string()
    .regex(/^[a-zA-Z0-9._-]*$/, 'letters, digits, dot, dash, underscore only')
    .default(''),
};
