export * from './service-process';
export * from './scratch-database';
export * from './backend-fixtures';
export * from './anvil-train';
