import 'reflect-metadata';
import { Global, Module, type DynamicModule } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import type { DataSource } from 'typeorm';
import { PromptChain, TOPICS, type EventEnvelope, type GenerateRequest, type LlmCallRecordedV1 } from '@anvil/contracts';

/** A recorded call as the bus carried it (v2, prompt delta) with its whole prompt rebuilt (v1 shape). */
export type RecordedCall = Omit<EventEnvelope<'llm_call.recorded'>, 'payload'> & { payload: LlmCallRecordedV1 };
import { MemoryBus, silentLogger, type MessageBus } from '@anvil/messaging';
import { createLogger, ServiceMetrics } from '@anvil/observability';
import { createDataSource, runMigrations } from '@anvil/persistence';
import { DATA_SOURCE, EVENT_BUS, OpsModule } from '@anvil/service-kit';
import { gatewayEnv, type GatewayConfig } from '../config';
import { GatewayApiModule } from '../gateway-api.module';
import { FakeInferenceProxy, type ScriptedReply } from './fake-inference-proxy';

export const ADMIN_TOKEN = 'harness-admin-token-0123456789abcdefghijklmnop';

/** A MessageBus whose publish can be made to fail (the broker refusing records). */
export class FlakyBus {
  failPublish = false;
  constructor(readonly inner: MessageBus) {}
  bus(): MessageBus {
    return new Proxy(this.inner, {
      get: (target, prop, receiver) => {
        if (prop === 'publish') {
          return async (events: EventEnvelope | readonly EventEnvelope[]) => {
            if (this.failPublish) throw new Error('broker unavailable (test)');
            return target.publish(events);
          };
        }
        const v = Reflect.get(target, prop, receiver);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
  }
}

export interface GatewayHarness {
  baseUrl: string;
  app: NestFastifyApplication;
  ds: DataSource;
  bus: MemoryBus;
  flaky: FlakyBus;
  proxy: FakeInferenceProxy;
  config: GatewayConfig;
  /** llm_call.recorded events published so far (read back from the bus). */
  records: RecordedCall[];
  createSession(
    body?: Partial<{
      rolloutId: string;
      groupId: string;
      taskId: string;
      model: string;
      expiresAt: number;
      maxContextTokens: number;
      weightSwap: 'finish' | 'abort-and-resume';
      maxCalls: number;
      callsPerSecond: number;
      callBurst: number;
    }>,
  ): Promise<{ sessionId: string; apiKey: string; baseUrl: string }>;
  admin(path: string, init?: RequestInit): Promise<Response>;
  requestsFor(sessionId: string): GenerateRequest[];
  close(): Promise<void>;
}

/**
 * The gateway in-process for tests without infrastructure: the real GatewayApiModule on Fastify,
 * PGlite (with the committed migrations) for PostgreSQL, the in-process MessageBus for Kafka, and
 * a scripted inference-proxy.
 */
export async function startGatewayHarness(
  opts: { script?: (req: GenerateRequest, n: number) => ScriptedReply; env?: Record<string, string> } = {},
): Promise<GatewayHarness> {
  const proxy = await new FakeInferenceProxy(opts.script ?? (() => ({ ids: [...Buffer.from('hello'), 258] }))).start();
  const config = gatewayEnv.parse({
    KAFKA_BROKERS: '127.0.0.1:9',
    DATABASE_URL: 'postgres://unused@127.0.0.1:9/unused',
    GATEWAY_ADMIN_TOKEN: ADMIN_TOKEN,
    INFERENCE_PROXY_URL: proxy.url,
    LOG_LEVEL: 'error',
    ...opts.env,
  });
  const ds = createDataSource();
  await ds.initialize();
  await runMigrations(ds);
  const bus = new MemoryBus({ logger: silentLogger });
  const flaky = new FlakyBus(bus);
  const records: RecordedCall[] = [];
  const chain = new PromptChain();
  await bus.subscribe({
    group: 'harness',
    topics: [TOPICS.llmCalls],
    fromBeginning: true,
    handler: async (e) => {
      // v2 carries prompt deltas; tests read whole prompts (rebuilt along the call chain).
      if (e.type === 'llm_call.recorded') records.push({ ...e, payload: chain.materialize(e.payload) });
    },
  });

  @Global()
  @Module({})
  class HarnessInfraModule {
    static forRoot(): DynamicModule {
      return {
        module: HarnessInfraModule,
        providers: [
          { provide: EVENT_BUS, useValue: flaky.bus() },
          { provide: DATA_SOURCE, useValue: ds },
        ],
        exports: [EVENT_BUS, DATA_SOURCE],
      };
    }
  }
  @Module({})
  class HarnessRootModule {}

  const logger = createLogger({ service: 'gateway', level: 'error' });
  const root: DynamicModule = {
    module: HarnessRootModule,
    imports: [
      OpsModule.forRoot({ service: 'gateway', logger, metrics: new ServiceMetrics('gateway') }),
      HarnessInfraModule.forRoot(),
      GatewayApiModule.forRoot({ ...config, DB_MIGRATE_ON_START: false }),
    ],
  };
  const app = await NestFactory.create<NestFastifyApplication>(root, new FastifyAdapter({ bodyLimit: config.MAX_REQUEST_BYTES }), {
    logger: false,
    abortOnError: false,
  });
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address();
  const baseUrl = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;

  const admin = (path: string, init: RequestInit = {}) =>
    fetch(`${baseUrl}${path}`, {
      ...init,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json', ...(init.headers as Record<string, string>) },
    });
  let sessions = 0;
  return {
    baseUrl,
    app,
    ds,
    bus,
    flaky,
    proxy,
    config,
    records,
    admin,
    async createSession(body = {}) {
      sessions++;
      const res = await admin('/admin/v1/sessions', {
        method: 'POST',
        body: JSON.stringify({
          rolloutId: `rollout-${sessions}`,
          groupId: 'group-1',
          taskId: 'task-1',
          model: config.GATEWAY_MODEL_NAME,
          ...body,
        }),
      });
      if (res.status !== 201) throw new Error(`createSession: ${res.status} ${await res.text()}`);
      return (await res.json()) as { sessionId: string; apiKey: string; baseUrl: string };
    },
    requestsFor: (sessionId) => proxy.requests.filter((r) => r.sessionId === sessionId),
    async close() {
      await app.close();
      await bus.close();
      await proxy.stop();
      await ds.destroy();
    },
  };
}

/** The records of `callIds`, in that order, once the bus has delivered them all. */
export async function recordsOf(h: Pick<GatewayHarness, 'records'>, callIds: readonly string[]): Promise<RecordedCall[]> {
  for (let i = 0; i < 250; i++) {
    const found = callIds.map((id) => h.records.find((r) => r.payload.callId === id));
    if (found.every(Boolean)) return found as RecordedCall[];
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`records ${callIds.join(',')} not seen`);
}

/** The first `n` records of a session, in turn order, once the bus has delivered them. */
export async function sessionRecords(h: Pick<GatewayHarness, 'records'>, sessionId: string, n: number): Promise<RecordedCall[]> {
  for (let i = 0; i < 250; i++) {
    const found = h.records.filter((r) => r.payload.sessionId === sessionId);
    if (found.length >= n) return found.sort((a, b) => a.payload.turnIndex - b.payload.turnIndex);
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`${n} records of ${sessionId} not seen`);
}

/**
 * Throws unless `next` extends `prev` token-exactly (DESIGN.md "Token-exact capture"): its parent,
 * and a prompt that starts with prev's prompt and output ids, all of them reused.
 */
export function assertExtends(next: RecordedCall, prev: RecordedCall): void {
  const p = prev.payload;
  const n = next.payload;
  const head = [...p.promptIds, ...p.outputIds];
  const problems = [
    n.parentCallId !== p.callId && `parent ${n.parentCallId}, not ${p.callId}`,
    n.branchId !== p.branchId && `branch ${n.branchId}, not ${p.branchId}`,
    head.some((id, i) => n.promptIds[i] !== id) && `its prompt does not start with ${p.callId}'s prompt + output ids`,
    n.reusedPromptTokens !== head.length && `${n.reusedPromptTokens} reused prompt tokens, not ${head.length}`,
  ].filter(Boolean);
  if (problems.length > 0) throw new Error(`${n.callId} does not extend ${p.callId}: ${problems.join('; ')}`);
}
