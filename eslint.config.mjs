import nx from '@nx/eslint-plugin';

// Frameworks and infrastructure clients: pure libraries (contracts, rl) import none of them.
const FRAMEWORK_IMPORTS = [
  '@nestjs/*',
  'typeorm',
  'kafkajs',
  'pg',
  '@electric-sql/*',
  'fastify',
  'express',
  '@opentelemetry/*',
  'prom-client',
];

export default [
  ...nx.configs['flat/base'],
  ...nx.configs['flat/typescript'],
  {
    ignores: ['**/dist', '**/node_modules', '**/.nx', '.cache/**', 'libs/engine/build/**', '**/*.mjs', '**/*.cjs', '**/*.js'],
  },
  {
    files: ['**/*.ts'],
    rules: {
      '@nx/enforce-module-boundaries': [
        'error',
        {
          enforceBuildableLibDependency: false,
          allow: [],
          // Benches and tests load some libraries lazily in one file and statically in another.
          checkDynamicDependenciesExceptions: ['@anvil/.*'],
          depConstraints: [
            // Each service (apps/<service>, tag type:app) is deployable on its own (src/main.ts) and
            // composable through its public entry point (src/index.ts, `@anvil/<service>`). Nx forbids
            // any import of a project of type "application", which would also forbid the hosts that
            // compose them; so the services are Nx library projects and these tags say who may import
            // what. Apps never import apps: an app may depend on libraries only.
            { sourceTag: 'type:app', onlyDependOnLibsWithTags: ['type:lib'] },
            { sourceTag: 'type:lib', onlyDependOnLibsWithTags: ['type:lib'] },
            // Hosts (the anvil CLI, tests, benches and tools) compose services through their entry
            // points; a relative import into another project's src/ is refused by the rule itself.
            { sourceTag: 'type:host', onlyDependOnLibsWithTags: ['type:lib', 'type:app', 'type:host'] },
            // Pure algorithms and contracts: only other pure libs, and no framework imports.
            { sourceTag: 'scope:pure', onlyDependOnLibsWithTags: ['scope:pure'], bannedExternalImports: FRAMEWORK_IMPORTS },
          ],
        },
      ],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
    },
  },
  {
    // Tests may use non-null assertions and casts freely.
    files: ['**/*.spec.ts', 'test/**/*.ts'],
    rules: { '@typescript-eslint/no-non-null-assertion': 'off', '@typescript-eslint/no-explicit-any': 'off' },
  },
];
