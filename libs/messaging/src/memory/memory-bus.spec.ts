import { describe } from 'vitest';
import { describeBusConformance } from '../testing/bus-conformance';
import { MemoryBroker } from './memory-broker';
import { MemoryBus } from './memory-bus';
import { silentLogger } from '../logger';

// Every client of one test namespace shares a broker, like processes sharing a Kafka cluster.
const brokers = new Map<string, MemoryBroker>();
const brokerFor = (namespace: string) => {
  let broker = brokers.get(namespace);
  if (!broker) brokers.set(namespace, (broker = new MemoryBroker()));
  return broker;
};

describe('MemoryBus', () => {
  describeBusConformance('in-process bus', (namespace) => new MemoryBus({ broker: brokerFor(namespace), topicPrefix: namespace, logger: silentLogger }), {
    cleanup: async (namespace) => void brokers.delete(namespace),
    waitMs: 10_000,
  });
});
