import type { EntityManager } from 'typeorm';

/** What the Data Pool's statements run on: the data source, or the manager of an open transaction. */
export type Db = Pick<EntityManager, 'query'>;

/** TypeORM's query() answers UPDATE/DELETE ... RETURNING with [rows, affected]: the rows. */
export function returned<T>(result: unknown): T[] {
  if (Array.isArray(result) && result.length === 2 && Array.isArray(result[0]) && typeof result[1] === 'number') return result[0] as T[];
  return result as T[];
}

/** An epoch-milliseconds column read as bigint (a string from the driver) as a number; null stays null. */
export const msOf = (v: string | number | null | undefined): number | null => (v === null || v === undefined ? null : Number(v));
