import { Module, type DynamicModule } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import type { DataSource } from 'typeorm';
import { InferenceProxyClient } from '@anvil/inference-client';
import type { MessageBus } from '@anvil/messaging';
import type { Logger, ServiceMetrics } from '@anvil/observability';
import { DATA_SOURCE, ERROR_FILTER_OPTIONS, EVENT_BUS, LOGGER, METRICS } from '@anvil/service-kit';
import { SessionAuthenticator } from './auth/session-auth';
import { CallRecorder } from './capture/call-recorder';
import { CaptureStore } from './capture/capture-store';
import { OutboxRelay } from './capture/outbox-relay';
import { RecordCommitter } from './capture/record-committer';
import { CallService } from './chat/call-service';
import type { GatewayConfig } from './config';
import { AdminController } from './http/admin.controller';
import { AnthropicController } from './http/anthropic.controller';
import { CallEndpoint } from './http/call-endpoint';
import { GatewayErrorFilter } from './http/gateway-error.filter';
import { HttpSetup } from './http/http-setup';
import { OpenAiController } from './http/openai.controller';
import { ResponsesController } from './http/responses.controller';
import { gatewayErrorOptions } from './http/http-errors';
import { GatewayLifecycle } from './lifecycle/gateway-lifecycle';
import { InFlightCalls } from './lifecycle/in-flight';
import { GatewayMetrics } from './metrics';
import { InferenceProxyProbe, type VocabularyMismatchError } from './models/inference-proxy-probe';
import { ModelRegistry } from './models/model-registry';
import { ResponseStore } from './responses/response-store';
import { SqlClient } from './db/sql-client';
import { PolicyVersionConsumer } from './sessions/policy-version.consumer';
import { PolicyVersionStore } from './sessions/policy-version-store';
import { SCHEMA_GATE, SchemaGate } from './sessions/schema-gate';
import { SessionLookups } from './sessions/session-lookups';
import { SessionStore } from './sessions/session-store';
import { CallLimitGate } from './sessions/call-limit-gate';
import { StalenessGate } from './sessions/staleness-gate';
import {
  CALL_ENDPOINT,
  CALL_SERVICE,
  CAPTURE_STORE,
  GATEWAY_CONFIG,
  GATEWAY_METRICS,
  IN_FLIGHT,
  INFERENCE_CLIENT,
  INFERENCE_PROBE,
  MODEL_REGISTRY,
  OUTBOX_RELAY,
  POLICY_VERSIONS,
  RESPONSE_STORE,
  SESSION_AUTH,
  SESSION_STORE,
  SQL_CLIENT,
} from './tokens';

/** A served model whose vocabulary disagrees with the tokenizer is a configuration error: exit 78, as for a bad environment. */
const exitOnMismatch = (logger: Logger) => (error: VocabularyMismatchError) => {
  logger.error('refusing to serve: model and tokenizer vocabularies disagree', { reason: error.message });
  process.exit(78);
};

/**
 * The gateway's own providers and controllers, on top of whatever supplies EVENT_BUS,
 * DATA_SOURCE, LOGGER and METRICS (Kafka + PostgreSQL in the service; an in-process bus and
 * PGlite in tests).
 */
@Module({})
export class GatewayApiModule {
  static forRoot(
    config: GatewayConfig,
    opts: { registry?: ModelRegistry; onVocabularyMismatch?: (error: VocabularyMismatchError) => void } = {},
  ): DynamicModule {
    return {
      module: GatewayApiModule,
      controllers: [AdminController, OpenAiController, ResponsesController, AnthropicController],
      providers: [
        { provide: GATEWAY_CONFIG, useValue: config },
        { provide: MODEL_REGISTRY, useFactory: () => opts.registry ?? ModelRegistry.fromConfig(config) },
        {
          provide: INFERENCE_CLIENT,
          useFactory: () =>
            new InferenceProxyClient({ baseUrl: config.INFERENCE_PROXY_URL, timeoutMs: config.GATEWAY_GENERATION_TIMEOUT_MS }),
        },
        {
          provide: INFERENCE_PROBE,
          inject: [INFERENCE_CLIENT, MODEL_REGISTRY, LOGGER],
          useFactory: (client: InferenceProxyClient, registry: ModelRegistry, logger: Logger) =>
            new InferenceProxyProbe(client, registry.list()[0].format.tokenizer, opts.onVocabularyMismatch ?? exitOnMismatch(logger)),
        },
        { provide: GATEWAY_METRICS, inject: [METRICS], useFactory: (m: ServiceMetrics) => new GatewayMetrics(m) },
        { provide: IN_FLIGHT, useFactory: () => new InFlightCalls() },
        {
          provide: SCHEMA_GATE,
          inject: [DATA_SOURCE, LOGGER],
          useFactory: (ds: DataSource, logger: Logger) => new SchemaGate(ds, config.DB_MIGRATE_ON_START, logger),
        },
        { provide: SQL_CLIENT, inject: [DATA_SOURCE], useFactory: (ds: DataSource) => new SqlClient(ds) },
        {
          provide: SESSION_STORE,
          inject: [DATA_SOURCE, SQL_CLIENT],
          useFactory: (ds: DataSource, sql: SqlClient) => new SessionStore(ds, sql),
        },
        {
          provide: SESSION_AUTH,
          inject: [SESSION_STORE, SQL_CLIENT],
          useFactory: (s: SessionStore, sql: SqlClient) => new SessionAuthenticator(s, new SessionLookups(sql)),
        },
        {
          provide: POLICY_VERSIONS,
          inject: [DATA_SOURCE],
          useFactory: (ds: DataSource) => new PolicyVersionStore(ds, config.INITIAL_POLICY_VERSION),
        },
        { provide: CAPTURE_STORE, inject: [SQL_CLIENT], useFactory: (sql: SqlClient) => new CaptureStore(sql) },
        {
          provide: OUTBOX_RELAY,
          inject: [SQL_CLIENT, EVENT_BUS, CAPTURE_STORE, SCHEMA_GATE, GATEWAY_METRICS, LOGGER],
          useFactory: (
            sql: SqlClient,
            bus: MessageBus,
            captures: CaptureStore,
            schema: SchemaGate,
            metrics: GatewayMetrics,
            logger: Logger,
          ) =>
            new OutboxRelay(sql, bus, {
              staleAfterMs: config.GATEWAY_OUTBOX_STALE_MS,
              sweepIntervalMs: config.GATEWAY_OUTBOX_SWEEP_MS,
              promptOf: (callId) => captures.promptIdsOf(callId),
              isReady: () => schema.isReady,
              onPublished: (n, via) => metrics.outboxPublished.inc({ via }, n),
              onBacklog: (n) => metrics.outboxBacklog.set(n),
              warn: (msg, fields) => logger.warn(msg, fields),
            }),
        },
        {
          provide: CALL_SERVICE,
          inject: [
            DATA_SOURCE,
            SQL_CLIENT,
            OUTBOX_RELAY,
            CAPTURE_STORE,
            SESSION_STORE,
            SESSION_AUTH,
            POLICY_VERSIONS,
            INFERENCE_CLIENT,
            MODEL_REGISTRY,
            GATEWAY_METRICS,
            LOGGER,
          ],
          useFactory: (
            ds: DataSource,
            sql: SqlClient,
            relay: OutboxRelay,
            captures: CaptureStore,
            sessions: SessionStore,
            auth: SessionAuthenticator,
            versions: PolicyVersionStore,
            client: InferenceProxyClient,
            registry: ModelRegistry,
            metrics: GatewayMetrics,
            logger: Logger,
          ) => {
            const committer = new RecordCommitter(sql, relay);
            return new CallService({
              config,
              registry,
              client,
              sessions,
              auth,
              gate: new StalenessGate(ds, versions, config.MAX_STALENESS),
              limits: new CallLimitGate(sql, { onRefused: (reason) => metrics.refused.inc({ reason }), logger }),
              captures,
              recorder: new CallRecorder(committer, captures, 'gateway'),
              metrics,
              logger: logger.child({ component: 'calls' }),
            });
          },
        },
        {
          provide: CALL_ENDPOINT,
          inject: [CALL_SERVICE, IN_FLIGHT, GATEWAY_METRICS, LOGGER],
          useFactory: (calls: CallService, inFlight: InFlightCalls, metrics: GatewayMetrics, logger: Logger) =>
            new CallEndpoint(calls, inFlight, metrics, gatewayErrorOptions(config.MAX_REQUEST_BYTES), logger),
        },
        { provide: RESPONSE_STORE, inject: [SQL_CLIENT], useFactory: (sql: SqlClient) => new ResponseStore(sql) },
        { provide: ERROR_FILTER_OPTIONS, useValue: gatewayErrorOptions(config.MAX_REQUEST_BYTES) },
        { provide: APP_FILTER, useClass: GatewayErrorFilter },
        HttpSetup,
        GatewayLifecycle,
        PolicyVersionConsumer,
      ],
    };
  }
}
