import {
  Inject,
  Injectable,
  type BeforeApplicationShutdown,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
  type OnModuleInit,
} from '@nestjs/common';
import type { Logger } from '@anvil/observability';
import { LOGGER, ReadinessRegistry } from '@anvil/service-kit';
import type { GatewayConfig } from '../config';
import { SCHEMA_GATE, type SchemaGate } from '../sessions/schema-gate';
import type { OutboxRelay } from '../capture/outbox-relay';
import type { InferenceProxyProbe } from '../models/inference-proxy-probe';
import type { ModelRegistry } from '../models/model-registry';
import { GATEWAY_CONFIG, IN_FLIGHT, INFERENCE_PROBE, MODEL_REGISTRY, OUTBOX_RELAY } from '../tokens';
import type { InFlightCalls } from './in-flight';

/** How often the model check is retried while the inference-proxy has not answered yet. */
const PROBE_RETRY_MS = 2_000;

/**
 * Readiness of the gateway's tables and of the inference-proxy (whose served model is checked
 * against the tokenizer before the gateway listens, or on its first answer when it is not up
 * yet), the outbox relay's sweeper, and graceful shutdown: before
 * the HTTP server and then the bus and the database close, running calls finish and their
 * records are published (new calls get 503); records the broker does not take in time stay in
 * the outbox for the next gateway's sweeper.
 */
@Injectable()
export class GatewayLifecycle implements OnModuleInit, OnApplicationBootstrap, OnModuleDestroy, BeforeApplicationShutdown {
  private probeTimer: NodeJS.Timeout | null = null;

  constructor(
    @Inject(INFERENCE_PROBE) private readonly probe: InferenceProxyProbe,
    @Inject(MODEL_REGISTRY) private readonly registry: ModelRegistry,
    @Inject(IN_FLIGHT) private readonly inFlight: InFlightCalls,
    @Inject(OUTBOX_RELAY) private readonly outbox: OutboxRelay,
    @Inject(SCHEMA_GATE) private readonly schema: SchemaGate,
    @Inject(GATEWAY_CONFIG) private readonly config: GatewayConfig,
    @Inject(LOGGER) private readonly logger: Logger,
    @Inject(ReadinessRegistry) private readonly readiness: ReadinessRegistry,
  ) {}

  onModuleInit(): void {
    this.readiness.add({
      name: 'gateway-schema',
      check: async () => {
        if (!this.schema.isReady) throw new Error('database schema not ready yet');
      },
    });
    this.readiness.add({ name: 'inference-proxy', check: () => this.probe.check() });
    for (const m of this.registry.list()) {
      this.logger.info('serving model', {
        model: m.name,
        chatFormat: this.config.GATEWAY_CHAT_FORMAT,
        tokenizer: m.format.tokenizer.name,
        vocabSize: m.format.tokenizer.vocabSize,
        // 'system': the template has no tool support, the gateway writes tools into the system prompt
        toolPrompt: m.format.toolPrompt,
        toolCallFormat: m.format.toolCallFormat,
        maxContextTokens: m.maxContextTokens,
      });
    }
    this.outbox.start();
  }

  /** Runs before the server listens: a proxy that is up already has its model checked now. */
  async onApplicationBootstrap(): Promise<void> {
    const attempt = () => this.probe.check().catch(() => undefined);
    await attempt();
    if (this.probe.checked) return;
    this.logger.warn('the inference-proxy does not answer yet; its model is checked once it does', {});
    this.probeTimer = setInterval(() => {
      if (this.probe.checked) this.stopProbing();
      else void attempt();
    }, PROBE_RETRY_MS);
    this.probeTimer.unref();
  }

  private stopProbing(): void {
    if (this.probeTimer) clearInterval(this.probeTimer);
    this.probeTimer = null;
  }

  /**
   * The first shutdown hook: refuse new calls at once (503 shutting_down) rather than after the
   * other modules' destroy hooks (consumers leaving their groups) have run; calls already running
   * go on, and beforeApplicationShutdown waits for them while the bus and the database are open.
   */
  onModuleDestroy(): void {
    this.stopProbing();
    this.inFlight.stopAccepting();
  }

  async beforeApplicationShutdown(): Promise<void> {
    const running = this.inFlight.size;
    if (running > 0) this.logger.info('finishing in-flight calls before shutdown', { running });
    const drained = await this.inFlight.drain(Math.max(1_000, this.config.SHUTDOWN_TIMEOUT_MS - 3_000));
    if (!drained) this.logger.warn('in-flight calls still running at the shutdown deadline', { running: this.inFlight.size });
    const backlog = this.outbox.backlog;
    if (!(await this.outbox.drain(2_000)))
      this.logger.warn('recorded calls left unpublished in the outbox at shutdown; the next gateway publishes them', { backlog });
  }
}
