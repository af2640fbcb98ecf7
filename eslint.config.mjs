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
          depConstraints: [
            // Apps never import apps: an app may depend on libraries only.
            { sourceTag: 'type:app', onlyDependOnLibsWithTags: ['type:lib'] },
            { sourceTag: 'type:lib', onlyDependOnLibsWithTags: ['type:lib'] },
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
