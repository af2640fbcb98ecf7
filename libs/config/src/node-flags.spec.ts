import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SERVICE_NODE_FLAGS } from './node-flags';

const root = join(__dirname, '..', '..', '..');

describe('SERVICE_NODE_FLAGS', () => {
  it("is what the Dockerfile and every app's serve target start node with", () => {
    const dockerCmd = readFileSync(join(root, 'Dockerfile'), 'utf8')
      .split('\n')
      .find((l) => l.startsWith('CMD '));
    for (const flag of SERVICE_NODE_FLAGS) expect(dockerCmd).toContain(`node ${flag}`);
    const apps = readdirSync(join(root, 'apps'));
    expect(apps.length).toBeGreaterThan(0);
    for (const app of apps) {
      const project = JSON.parse(readFileSync(join(root, 'apps', app, 'project.json'), 'utf8')) as {
        targets: { serve?: { options?: { command?: string } } };
      };
      const command = project.targets.serve?.options?.command ?? '';
      expect(command, app).toBe(`node ${SERVICE_NODE_FLAGS.join(' ')} dist/apps/${app}/src/main.js`);
    }
  });
});
