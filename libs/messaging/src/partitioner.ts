/**
 * Key → partition, identical to Kafka's Java client and kafkajs' DefaultPartitioner
 * (murmur2 of the UTF-8 key, sign bit cleared, modulo the partition count). Both buses use
 * this one function, so a key lands on the same partition number in the embedded bus and in
 * Kafka, and a Java or Python producer writing the same key agrees with us.
 */
export function partitionForKey(key: string | Uint8Array, numPartitions: number): number {
  if (!Number.isInteger(numPartitions) || numPartitions < 1) throw new Error(`invalid partition count ${numPartitions}`);
  const bytes = typeof key === 'string' ? Buffer.from(key, 'utf8') : key;
  return (murmur2(bytes) & 0x7fffffff) % numPartitions;
}

/** Kafka's murmur2 (Utils.murmur2): 32-bit arithmetic via Math.imul and `| 0`. */
export function murmur2(data: Uint8Array): number {
  const length = data.length;
  const m = 0x5bd1e995;
  let h = (0x9747b28c ^ length) | 0;
  const length4 = length >>> 2;
  for (let i = 0; i < length4; i++) {
    const i4 = i * 4;
    let k = data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24);
    k = Math.imul(k, m);
    k ^= k >>> 24;
    k = Math.imul(k, m);
    h = Math.imul(h, m) ^ k;
  }
  // Java's fall-through switch over the 1-3 trailing bytes, unrolled.
  const tail = length & ~3;
  const rest = length & 3;
  if (rest >= 3) h ^= data[tail + 2] << 16;
  if (rest >= 2) h ^= data[tail + 1] << 8;
  if (rest >= 1) {
    h ^= data[tail];
    h = Math.imul(h, m);
  }
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h | 0;
}

/** Keyless messages: round-robin per topic, as Kafka's producers do. */
export class RoundRobin {
  private readonly counters = new Map<string, number>();

  next(topic: string, numPartitions: number): number {
    const n = (this.counters.get(topic) ?? 0) + 1;
    this.counters.set(topic, n);
    return n % numPartitions;
  }
}
