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
    // The services (tag type:app); apps/anvil is the command line, not a service.
    const projects = readdirSync(join(root, 'apps')).map((app) => ({
      app,
      project: JSON.parse(readFileSync(join(root, 'apps', app, 'project.json'), 'utf8')) as {
        tags: string[];
        targets: { serve?: { options?: { command?: string } } };
      },
    }));
    const services = projects.filter((p) => p.project.tags.includes('type:app'));
    expect(services.map((p) => p.app).sort()).toEqual(['gateway', 'inference-proxy', 'middleware', 'rollout-manager', 'trainer']);
    for (const { app, project } of services) {
      const command = project.targets.serve?.options?.command ?? '';
      expect(command, app).toBe(`node ${SERVICE_NODE_FLAGS.join(' ')} dist/apps/${app}/src/main.js`);
    }
  });
});
