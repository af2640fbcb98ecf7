import { Partitioners, type PartitionMetadata } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { murmur2, partitionForKey } from './partitioner';

const metadata = (n: number): PartitionMetadata[] =>
  Array.from({ length: n }, (_, partitionId) => ({ partitionId, leader: 0, partitionErrorCode: 0, replicas: [0], isr: [0] }));

describe('partitionForKey', () => {
  it('matches the Java client murmur2 on published vectors', () => {
    // Values from Kafka's UtilsTest.testMurmur2.
    expect(murmur2(Buffer.from('21'))).toBe(-973932308);
    expect(murmur2(Buffer.from('foobar'))).toBe(-790332482);
    expect(murmur2(Buffer.from('a-little-bit-long-string'))).toBe(-985981536);
    expect(murmur2(Buffer.from('a-little-bit-longer-string'))).toBe(-1486304829);
    expect(murmur2(Buffer.from('lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8'))).toBe(-58897971);
    expect(murmur2(Buffer.from([0x61, 0x62, 0x63]))).toBe(479470107);
  });

  it("agrees with kafkajs' DefaultPartitioner for every partition count", () => {
    const kafkajs = Partitioners.DefaultPartitioner();
    for (let i = 0; i < 500; i++) {
      const key = `rollout-${i}-${'é'.repeat(i % 5)}-${i * 7919}`;
      for (const n of [1, 2, 3, 7, 12]) {
        expect(partitionForKey(key, n)).toBe(kafkajs({ topic: 't', partitionMetadata: metadata(n), message: { key, value: null } }));
      }
    }
  });

  it('rejects a non-positive partition count', () => {
    expect(() => partitionForKey('k', 0)).toThrow(/invalid partition count/);
  });
});
