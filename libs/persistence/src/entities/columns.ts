import type { ColumnOptions } from 'typeorm';

/** Ids are text of at most 128 chars, as the contracts define them (`id()` in contracts/events/common). */
export const ID_LENGTH = 128;
export const idColumn = { type: 'varchar', length: ID_LENGTH } as const satisfies ColumnOptions;
/** Event timestamps travel as ms since epoch and are stored as timestamptz (ms survive exactly). */
export const timeColumn = { type: 'timestamptz' } as const satisfies ColumnOptions;

/** What a jsonb column holds. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };
