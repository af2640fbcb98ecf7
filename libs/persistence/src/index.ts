export {
  createDataSource,
  createDataSourceOptions,
  isEmbeddedDatabaseUrl,
  MIGRATIONS_TABLE,
  pgliteOfUrl,
  type CreateDataSourceOptions,
} from './data-source';
export { runMigrations, revertAllMigrations, schemaDrift } from './migrate';
export * from './entities';
export { MIGRATIONS } from './migrations';
export * from './stores';
export { decodeTokenArray, encodeTokenArray, tokenArrayTransformer, type TokenArray, type TokenArrayType } from './codec/token-bytea';
export * from './pglite';
export * from './outbox';
