import type { DataSource, EntityManager, EntityTarget, ObjectLiteral } from 'typeorm';
import type { QueryDeepPartialEntity } from 'typeorm/query-builder/QueryPartialEntity';

/**
 * Runs `work` in the caller's transaction when given one (so a consumer can fold several
 * writes and its own side effects into one commit), otherwise in a new transaction.
 */
export async function inTransaction<T>(
  ds: DataSource,
  manager: EntityManager | undefined,
  work: (manager: EntityManager) => Promise<T>,
): Promise<T> {
  if (manager?.queryRunner?.isTransactionActive) return work(manager);
  return (manager ?? ds.manager).transaction(work);
}

/**
 * INSERT ... ON CONFLICT DO NOTHING (any unique or primary key): the idempotent write behind
 * every event. Returns how many rows were actually inserted (0 for a redelivery). Under
 * concurrent duplicates PostgreSQL makes the later insert wait for the earlier one's
 * commit and then skip, so no unique violation ever reaches the caller.
 */
export async function insertIgnoringDuplicates<T extends ObjectLiteral>(
  manager: EntityManager,
  entity: EntityTarget<T>,
  values: Partial<T> | Partial<T>[],
): Promise<number> {
  const result = await manager
    .createQueryBuilder()
    .insert()
    .into(entity)
    .values(values as QueryDeepPartialEntity<T> | QueryDeepPartialEntity<T>[])
    .orIgnore()
    .updateEntity(false)
    // Only inserted rows come back, which is how a duplicate is told apart.
    .returning('1 AS "inserted"')
    .execute();
  return (result.raw as unknown[]).length;
}

/**
 * INSERT ... ON CONFLICT (conflictPaths) DO UPDATE through TypeORM's upsert. Rows are typed
 * shallowly: TypeORM's deep partial type does not terminate on recursive JSON columns.
 */
export async function upsertRows<T extends ObjectLiteral>(
  manager: EntityManager,
  entity: EntityTarget<T>,
  rows: Partial<T>[],
  conflictPaths: (keyof T & string)[],
): Promise<void> {
  if (rows.length === 0) return;
  await manager.upsert(entity, rows as QueryDeepPartialEntity<T>[], { conflictPaths });
}
