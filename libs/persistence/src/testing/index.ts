// Test helpers. Not re-exported from the library's index: they import vitest.
export * from './migration-behaviour.suite';
