import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '@anvil/config';
import { gatewayEnv } from '@anvil/gateway';
import { inferenceProxyEnv } from '@anvil/inference-proxy';
import { middlewareEnv } from '@anvil/middleware';
import { rolloutManagerEnv } from '@anvil/rollout-manager';
import { trainerEnv } from '@anvil/trainer';
import { APPS as STACK_APPS, knobEnvs, parseRunConfig, serviceEnv, type RunInfrastructure, type RunWiring } from '@anvil/cli';

// Validates docker-compose.yml the way `docker compose config` does (no Docker engine needed):
// tools/infra/compose.mjs uses the docker compose v2 plugin when present, else a compose-go build.
const root = resolve(__dirname, '..', '..');
const composeFile = join(root, 'docker-compose.yml');
const SECRETS = { GATEWAY_ADMIN_TOKEN: 'g'.repeat(40), POSTGRES_PASSWORD: 'p'.repeat(24) };
/** What compose requires besides the secrets: the starting weights (a model directory: the trainer's config checks its config.json). */
const modelDir = mkdtempSync(join(tmpdir(), 'anvil-compose-model-'));
writeFileSync(join(modelDir, 'config.json'), '{}');
const REQUIRED = { ...SECRETS, ANVIL_MODEL_DIR: modelDir };
const APPS: Record<string, number> = {
  gateway: 8080,
  'inference-proxy': 8081,
  'rollout-manager': 8082,
  middleware: 8083,
  trainer: 8084,
};

/** Env without any value for the variables the compose file requires. */
function baseEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ANVIL_INFRA_QUIET: '1' };
  for (const k of [...Object.keys(REQUIRED), 'COMPOSE_FILE', 'COMPOSE_PROJECT_NAME', 'LOG_LEVEL']) delete env[k];
  return env;
}

function composeConfig(args: string[], env: NodeJS.ProcessEnv, file = composeFile) {
  const r = spawnSync(process.execPath, [join(root, 'tools/infra/compose.mjs'), 'config', '-f', file, ...args], {
    cwd: root,
    env,
    encoding: 'utf8',
    timeout: 600_000,
  });
  return { status: r.status, stdout: r.stdout ?? '', stderr: r.stderr ?? '' };
}

interface ComposeService {
  image?: string;
  build?: { context: string; dockerfile?: string; args?: Record<string, string> };
  environment?: Record<string, string | null>;
  healthcheck?: { test?: string[] };
  depends_on?: Record<string, { condition: string }>;
  volumes?: { type: string; source?: string; target: string; read_only?: boolean }[];
  ports?: { target: number; published?: string; host_ip?: string }[];
}
interface ComposeProject {
  name: string;
  services: Record<string, ComposeService>;
}

describe('docker-compose.yml', () => {
  let project: ComposeProject;
  let tmp: string;

  beforeAll(() => {
    tmp = mkdtempSync(join(tmpdir(), 'anvil-compose-'));
    // First call may build the compose-go validator (tens of seconds on a cold machine).
    const r = composeConfig(['--format', 'json'], { ...baseEnv(), ...REQUIRED });
    if (r.status !== 0) throw new Error(`compose config failed (${r.status}):\n${r.stderr}${r.stdout}`);
    project = JSON.parse(r.stdout) as ComposeProject;
  }, 600_000);

  afterAll(() => {
    rmSync(tmp, { recursive: true, force: true });
    rmSync(modelDir, { recursive: true, force: true });
  });

  it('parses and names kafka, postgres, the otel collector and the five services', () => {
    expect(project.name).toBe('anvil');
    expect(Object.keys(project.services).sort()).toEqual(['kafka', 'postgres', 'otel-collector', ...Object.keys(APPS)].sort());
    expect(project.services.kafka.image).toMatch(/^apache\/kafka:4\./);
    expect(project.services.postgres.image).toMatch(/^postgres:1[56]/);
    expect(project.services['otel-collector'].image).toMatch(/^otel\/opentelemetry-collector-contrib:/);
  });

  it('lists the same services with --services', () => {
    const r = composeConfig(['--services'], { ...baseEnv(), ...REQUIRED });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim().split('\n').sort()).toEqual(Object.keys(project.services).sort());
  });

  it('builds every service from the one Dockerfile with its APP, port, env and /readyz healthcheck', () => {
    for (const [app, port] of Object.entries(APPS)) {
      const svc = project.services[app];
      expect(svc.build?.args?.APP, app).toBe(app);
      expect(resolve(svc.build!.context), app).toBe(root);
      expect(svc.build?.dockerfile ?? 'Dockerfile', app).toBe('Dockerfile');
      const env = svc.environment ?? {};
      expect(env.PORT, app).toBe(String(port));
      expect(env.KAFKA_BROKERS, app).toBe('kafka:9092');
      expect(env.DATABASE_URL, app).toBe(`postgres://anvil:${SECRETS.POSTGRES_PASSWORD}@postgres:5432/anvil`);
      expect(env.OTEL_EXPORTER_OTLP_ENDPOINT, app).toBe('http://otel-collector:4318');
      expect(env.HOST, app).toBe('0.0.0.0');
      expect(svc.healthcheck?.test?.join(' '), app).toContain('/readyz');
      expect(svc.depends_on?.kafka?.condition, app).toBe('service_healthy');
      expect(svc.depends_on?.postgres?.condition, app).toBe('service_healthy');
      expect(svc.depends_on?.['otel-collector'], app).toBeDefined();
    }
    expect(project.services.gateway.environment?.GATEWAY_ADMIN_TOKEN).toBe(SECRETS.GATEWAY_ADMIN_TOKEN);
    expect(project.services['rollout-manager'].environment?.GATEWAY_ADMIN_TOKEN).toBe(SECRETS.GATEWAY_ADMIN_TOKEN);
    expect(project.services.gateway.environment?.INFERENCE_PROXY_URL).toBe('http://inference-proxy:8081');
    expect(project.services['rollout-manager'].environment?.GATEWAY_URL).toBe('http://gateway:8080');
    expect(project.services.trainer.environment?.CHECKPOINT_DIR).toBeTruthy();
  });

  it("gives each service every variable its config.ts requires: the environment passes the service's own validation", () => {
    const schemas = {
      gateway: gatewayEnv,
      'inference-proxy': inferenceProxyEnv,
      'rollout-manager': rolloutManagerEnv,
      middleware: middlewareEnv,
      trainer: trainerEnv,
    };
    for (const [app, schema] of Object.entries(schemas)) {
      const svc = project.services[app];
      // As the container sees it: a path under a bind mount is read from the mount's source on this host.
      const env = { ...svc.environment } as Record<string, string>;
      for (const v of svc.volumes ?? [])
        for (const [k, value] of Object.entries(env))
          if (v.type === 'bind' && v.source && (value === v.target || value.startsWith(`${v.target}/`)))
            env[k] = v.source + value.slice(v.target.length);
      expect(() => loadConfig(app, schema, env), app).not.toThrow();
    }
  });

  it('sets the knobs and the wiring `anvil stack up` sets for the default run configuration (apps/anvil/src/config/service-settings.ts)', () => {
    const cfg = parseRunConfig({});
    const knobs = knobEnvs(cfg);
    const wiring: RunWiring = {
      runId: 'r',
      model: { checkpointDir: '/m', chatFormatDir: null, servedName: 'anvil-tiny' },
      adminToken: 'a'.repeat(48),
      checkpointDir: '/c',
    };
    const infra: RunInfrastructure = { kafkaBrokers: 'k:1', databaseUrl: 'postgres://a@b/c', topicPrefix: 'p.' };
    const urls = Object.fromEntries(STACK_APPS.map((a) => [a, 'http://h:1']));
    for (const app of STACK_APPS) {
      const env = project.services[app].environment ?? {};
      for (const [k, v] of Object.entries(knobs[app])) expect(env[k], `${app} ${k}`).toBe(v);
      // Every variable the stack hands the service, except the topic prefix (one compose deployment per broker).
      const missing = Object.keys(serviceEnv(app, cfg, wiring, infra, urls)).filter((k) => k !== 'KAFKA_TOPIC_PREFIX' && !(k in env));
      expect(missing, app).toEqual([]);
    }
  });

  it('shares the starting weights and the checkpoints volume between the trainer and the proxy, and one run id and staleness bound between the services', () => {
    const trainer = project.services.trainer;
    const proxy = project.services['inference-proxy'];
    // weights.published names a directory under the trainer's CHECKPOINT_DIR: the proxy must see the same path.
    const checkpoints = trainer.environment?.CHECKPOINT_DIR;
    expect(trainer.volumes?.find((v) => v.target === checkpoints)).toMatchObject({ type: 'volume', source: 'checkpoints' });
    expect(trainer.volumes?.find((v) => v.target === checkpoints)?.read_only ?? false).toBe(false);
    expect(proxy.volumes?.find((v) => v.target === checkpoints)).toMatchObject({ type: 'volume', source: 'checkpoints', read_only: true });
    // The proxy serves what the trainer starts from.
    const model = trainer.environment?.TRAINER_INITIAL_CHECKPOINT_DIR;
    expect(proxy.environment?.EMBEDDED_CHECKPOINT_DIR).toBe(model);
    for (const svc of [trainer, proxy])
      expect(svc.volumes?.find((v) => v.target === model)).toMatchObject({ type: 'bind', source: modelDir, read_only: true });

    const r = composeConfig(['--format', 'json'], { ...baseEnv(), ...REQUIRED, ANVIL_RUN_ID: 'run-7', ANVIL_ETA: '3' });
    expect(r.status, r.stderr).toBe(0);
    const s = (JSON.parse(r.stdout) as ComposeProject).services;
    expect([s.middleware.environment?.DATA_POOL_RUN_ID, s.trainer.environment?.TRAINER_RUN_ID]).toEqual(['run-7', 'run-7']);
    expect([s.gateway.environment?.MAX_STALENESS, s['rollout-manager'].environment?.MAX_STALENESS]).toEqual(['3', '3']);
  });

  it('gives kafka and postgres healthchecks and mounts the collector config', () => {
    expect(project.services.kafka.healthcheck?.test?.join(' ')).toContain('9092');
    expect(project.services.postgres.healthcheck?.test?.join(' ')).toContain('pg_isready');
    const mount = project.services['otel-collector'].volumes?.find((v) => v.source?.endsWith('deploy/otel-collector.yaml'));
    expect(mount).toBeDefined();
    expect(existsSync(mount!.source!)).toBe(true);
    expect(readFileSync(mount!.source!, 'utf8')).toMatch(/otlp:[\s\S]*4318/);
  });

  it('refuses to render without the secrets and the starting weights (no dummy defaults)', () => {
    const r = composeConfig(['--format', 'json'], baseEnv());
    expect(r.status).not.toBe(0);
    const text = r.stderr + r.stdout;
    expect(text).toContain('GATEWAY_ADMIN_TOKEN');
    expect(text).toContain('POSTGRES_PASSWORD');
    expect(text).toContain('ANVIL_MODEL_DIR');
  });

  it('actually validates: a dependency on an undefined service is rejected', () => {
    const bad = join(tmp, 'compose.yml');
    writeFileSync(bad, 'services:\n  a:\n    image: busybox\n    depends_on:\n      b:\n        condition: service_healthy\n');
    const r = composeConfig(['--format', 'json'], baseEnv(), bad);
    expect(r.status).not.toBe(0);
    expect(r.stderr + r.stdout).toMatch(/\bb\b/);
  });

  it('Dockerfile is one parametrised multi-stage recipe', () => {
    const dockerfile = readFileSync(join(root, 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/^FROM \S+ AS build$/m);
    expect(dockerfile).toMatch(/^ARG APP$/m);
    expect(dockerfile).toMatch(/npm ci/);
    expect(dockerfile).toMatch(/npm prune --omit=dev/);
    expect(dockerfile).toMatch(/^USER node$/m);
    const ignore = readFileSync(join(root, '.dockerignore'), 'utf8').split('\n');
    for (const entry of ['.git', 'dist', '.cache', '.nx']) expect(ignore).toContain(entry);
    expect(ignore.some((l) => l.endsWith('node_modules'))).toBe(true);
  });
});
