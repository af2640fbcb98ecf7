import pg from 'pg';
import type { ParserOptions, Results, SerializerOptions } from '@electric-sql/pglite';

/**
 * Makes PGlite speak like node-postgres, so entities hydrate identically on the embedded
 * database and on a PostgreSQL server: same parameter preparation, same type parsers
 * (int8 and numeric as strings, bytea as Buffer, ...), same result shape.
 */

const BYTEA_OID = 17;

type PrepareValue = (value: unknown) => unknown;
// pg exports its own parameter preparation (Date -> local ISO with offset, arrays -> array
// literal, objects -> JSON, typed arrays -> Buffer) but @types/pg does not declare it.
function loadPrepareValue(): PrepareValue {
  const fn = (pg as unknown as { utils?: { prepareValue?: PrepareValue } }).utils?.prepareValue;
  if (typeof fn !== 'function')
    throw new Error('pg.utils.prepareValue is missing: the PGlite driver relies on pg 8 for parameter preparation');
  return fn;
}
const prepareValue = loadPrepareValue();

/** Parameters exactly as node-postgres would send them (strings, Buffers or null). */
export function prepareParams(values: readonly unknown[]): unknown[] {
  return values.map((value) => prepareValue(value));
}

/**
 * One parser per built-in type OID, resolved at call time through pg's registry, so a
 * pg.types.setTypeParser() made by the application applies to PGlite as well.
 * PGlite derives its array parsers from these element parsers.
 */
export function pgTypeParsers(): ParserOptions {
  const parsers: ParserOptions = {};
  for (const oid of Object.values(pg.types.builtins)) {
    parsers[oid] = (text: string) => pg.types.getTypeParser(oid, 'text')(text);
  }
  return parsers;
}

/** PGlite's own bytea serializer builds one string per byte; a 1 MiB token array needs hex in one go. */
export function pgParamSerializers(): SerializerOptions {
  return {
    [BYTEA_OID]: (value: unknown) => {
      if (typeof value === 'string') return value;
      if (value instanceof Uint8Array) return '\\x' + Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex');
      throw new TypeError('bytea parameter must be a Buffer, a Uint8Array or a string');
    },
  };
}

/** The subset of pg.QueryResult that TypeORM (and most pg users) read. */
export interface PgQueryResult {
  command: string;
  rowCount: number | null;
  oid: number;
  rows: unknown[];
  fields: { name: string; dataTypeID: number }[];
  rowAsArray: boolean;
}

export function toPgResult(result: Results, rowAsArray: boolean): PgQueryResult {
  return {
    command: result.command ?? '',
    rowCount: result.rowCount ?? null,
    oid: 0,
    rows: result.rows,
    fields: result.fields,
    rowAsArray,
  };
}
