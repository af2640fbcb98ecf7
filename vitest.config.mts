import { defineConfig } from 'vitest/config';
import { fileURLToPath } from 'node:url';

// One config, three projects: unit tests beside the code (no infrastructure), integration
// tests against the real Kafka broker and PostgreSQL server (started by tools/test/run-all.mjs),
// and end-to-end tests that run built services as separate processes.
const root = fileURLToPath(new URL('.', import.meta.url));
// Test support (each project's src/testing/, excluded from builds) under `@anvil/<project>/testing`;
// listed first, since an alias also matches the paths below it.
const alias = {
  '@anvil/messaging/testing': `${root}libs/messaging/src/testing/index.ts`,
  '@anvil/persistence/testing': `${root}libs/persistence/src/testing/index.ts`,
  '@anvil/tokenizer/testing': `${root}libs/tokenizer/src/testing/index.ts`,
  '@anvil/middleware/testing': `${root}apps/middleware/src/testing/index.ts`,
  '@anvil/contracts/testing': `${root}libs/contracts/src/testing/index.ts`,
  '@anvil/gateway/testing': `${root}apps/gateway/src/testing/index.ts`,
  '@anvil/inference-proxy/testing': `${root}apps/inference-proxy/src/testing/index.ts`,
  '@anvil/contracts': `${root}libs/contracts/src/index.ts`,
  '@anvil/config': `${root}libs/config/src/index.ts`,
  '@anvil/messaging': `${root}libs/messaging/src/index.ts`,
  '@anvil/persistence': `${root}libs/persistence/src/index.ts`,
  '@anvil/observability': `${root}libs/observability/src/index.ts`,
  '@anvil/service-kit': `${root}libs/service-kit/src/index.ts`,
  '@anvil/rl': `${root}libs/rl/src/index.ts`,
  '@anvil/engine': `${root}libs/engine/src/index.ts`,
  '@anvil/testing': `${root}libs/testing/src/index.ts`,
  '@anvil/inference-client': `${root}libs/inference-client/src/index.ts`,
  '@anvil/tokenizer': `${root}libs/tokenizer/src/index.ts`,
  '@anvil/infra': `${root}tools/infra/index.ts`,
  '@anvil/model-import': `${root}libs/model-import/src/index.ts`,
  '@anvil/guided-decoding': `${root}libs/guided-decoding/src/index.ts`,
  '@anvil/sandbox': `${root}libs/sandbox/src/index.ts`,
  '@anvil/cli': `${root}apps/anvil/src/index.ts`,
  '@anvil/train-batch': `${root}libs/train-batch/src/index.ts`,
  '@anvil/gateway': `${root}apps/gateway/src/index.ts`,
  '@anvil/inference-proxy': `${root}apps/inference-proxy/src/index.ts`,
  '@anvil/middleware': `${root}apps/middleware/src/index.ts`,
  '@anvil/rollout-manager': `${root}apps/rollout-manager/src/index.ts`,
  '@anvil/trainer': `${root}apps/trainer/src/index.ts`,
};
const shared = { resolve: { alias } };

export default defineConfig({
  test: {
    projects: [
      {
        ...shared,
        test: {
          name: 'unit',
          include: ['apps/*/src/**/*.spec.ts', 'libs/*/src/**/*.spec.ts', 'tools/**/*.spec.ts'],
          exclude: ['**/*.int.spec.ts', '**/node_modules/**'],
          testTimeout: 60_000,
          // in-process harnesses (PGlite + migrations) take >10 s to start on a loaded 2-core machine
          hookTimeout: 60_000,
        },
      },
      {
        ...shared,
        test: {
          name: 'integration',
          include: ['apps/*/src/**/*.int.spec.ts', 'libs/*/src/**/*.int.spec.ts', 'test/integration/**/*.int.spec.ts'],
          testTimeout: 180_000,
          hookTimeout: 180_000,
          fileParallelism: false,
        },
      },
      {
        ...shared,
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.e2e.spec.ts'],
          // the learning test takes both cores for ~7 minutes: its own project, run alone after the others (tools/test/run-all.mjs)
          exclude: ['test/e2e/main-learns.e2e.spec.ts', '**/node_modules/**'],
          testTimeout: 300_000,
          hookTimeout: 300_000,
          fileParallelism: false,
        },
      },
      {
        ...shared,
        test: {
          name: 'learning',
          include: ['test/e2e/main-learns.e2e.spec.ts'],
          testTimeout: 2_700_000,
        },
      },
    ],
  },
});
