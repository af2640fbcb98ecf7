import type { MessageBus } from './bus';
import { KafkaBus } from './kafka/kafka-bus';
import type { KafkaBusOptions } from './kafka/kafka-options';
import { MemoryBus, type MemoryBusOptions } from './memory/memory-bus';

export type BusConfig = ({ kind: 'kafka' } & KafkaBusOptions) | ({ kind: 'memory' } & MemoryBusOptions);

/**
 * The bus for a deployment: Kafka when services run as separate processes, the in-process bus
 * for the embedded single-process default. Never blocks: Kafka connects on first use.
 */
export function createBus(config: BusConfig): MessageBus {
  switch (config.kind) {
    case 'kafka': {
      const { kind: _kind, ...options } = config;
      return new KafkaBus(options);
    }
    case 'memory': {
      const { kind: _kind, ...options } = config;
      return new MemoryBus(options);
    }
    default:
      throw new Error(`unknown bus kind ${JSON.stringify((config as { kind: unknown }).kind)}`);
  }
}
