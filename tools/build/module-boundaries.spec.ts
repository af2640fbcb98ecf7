import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { ESLint } from 'eslint';
import { beforeAll, describe, expect, it } from 'vitest';

/**
 * Proves the Nx tag constraints really forbid what the layout forbids: each snippet is
 * linted as if it were a file at the given path, with the workspace's own ESLint config.
 */
const root = join(__dirname, '..', '..');
let eslint: ESLint;

beforeAll(() => {
  // The boundary rule skips itself without a cached project graph; compute it like `npm run lint`.
  const r = spawnSync('npx', ['nx', 'show', 'projects'], { cwd: root, env: { ...process.env, NX_DAEMON: 'false' } });
  expect(r.status, r.stderr?.toString()).toBe(0);
  eslint = new ESLint({ cwd: root });
}, 120_000);

async function boundaryErrors(file: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath: join(root, file) });
  return result.messages.filter((m) => m.ruleId === '@nx/enforce-module-boundaries').map((m) => m.message);
}

describe('Nx module boundaries', () => {
  it('allow an app to import libraries', async () => {
    expect(
      await boundaryErrors('apps/gateway/src/probe.ts', "import { TOPICS } from '@anvil/contracts';\nexport const t = TOPICS;\n"),
    ).toEqual([]);
  });

  it("let a host (tests, benches, the CLI) import a service's public entry point", async () => {
    const code = "import { GatewayModule } from '@anvil/gateway';\nexport const m = GatewayModule;\n";
    expect(await boundaryErrors('test/integration/probe.int.spec.ts', code)).toEqual([]);
    expect(await boundaryErrors('tools/bench/suites/probe.ts', code)).toEqual([]);
  });

  it("forbid a host reaching into a service's src/ by a relative path", async () => {
    const code = "import { CallService } from '../../apps/gateway/src/chat/call-service';\nexport const c = CallService;\n";
    const errors = await boundaryErrors('test/integration/probe.int.spec.ts', code);
    expect(errors.join('\n')).toMatch(/relative or absolute path/);
  });

  it("forbid an app importing another app's public entry point", async () => {
    const errors = await boundaryErrors(
      'apps/gateway/src/probe.ts',
      "import { TrainerRuntime } from '@anvil/trainer';\nexport const t = TrainerRuntime;\n",
    );
    expect(errors.join('\n')).toMatch(/type:lib/);
  });

  it('forbid a library importing a service', async () => {
    // Nx names the circle first where the service already depends on the library; either refuses it.
    const errors = await boundaryErrors(
      'libs/service-kit/src/probe.ts',
      "import { GatewayModule } from '@anvil/gateway';\nexport const m = GatewayModule;\n",
    );
    expect(errors.join('\n')).toMatch(/type:lib|Circular dependency/);
  });

  it('forbid a service importing a host (the test tooling)', async () => {
    const errors = await boundaryErrors(
      'apps/gateway/src/probe.ts',
      "import { startStack } from '@anvil/infra';\nexport const s = startStack;\n",
    );
    expect(errors.join('\n')).toMatch(/type:lib|Circular dependency/);
  });

  it('forbid an app importing another app', async () => {
    const errors = await boundaryErrors(
      'apps/gateway/src/probe.ts',
      "import { TrainerModule } from '../../trainer/src/app.module';\nexport const m = TrainerModule;\n",
    );
    expect(errors.length).toBeGreaterThan(0);
  });

  it.each([
    ['libs/contracts/src/probe.ts', '@nestjs/common'],
    ['libs/contracts/src/probe.ts', 'kafkajs'],
    ['libs/rl/src/probe.ts', 'typeorm'],
    ['libs/rl/src/probe.ts', '@nestjs/core'],
    ['libs/rl/src/probe.ts', 'pg'],
  ])('forbid %s importing the framework %s', async (file, pkg) => {
    const errors = await boundaryErrors(file, `import * as x from '${pkg}';\nexport const y = x;\n`);
    expect(errors.join('\n')).toMatch(new RegExp(`imports of "${pkg.replace('/', '\\/')}"|${pkg}`, 'i'));
  });

  it('forbid a pure lib importing an infrastructure lib', async () => {
    const errors = await boundaryErrors(
      'libs/rl/src/probe.ts',
      "import { createBus } from '@anvil/messaging';\nexport const b = createBus;\n",
    );
    expect(errors.join('\n')).toMatch(/scope:pure/);
  });
});
