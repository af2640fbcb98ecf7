/** One stored message, byte for byte what Kafka would hold. */
export interface StoredRecord {
  key: string | null;
  value: Buffer | null;
  headers: Record<string, Buffer>;
  timestamp: number;
}

class Partition {
  /** records[i] has offset base + i; entries below `start` were released. */
  records: (StoredRecord | undefined)[] = [];
  base = 0;
  start = 0;
  private waiters = new Set<() => void>();

  get end(): number {
    return this.base + this.records.length;
  }

  append(record: StoredRecord): number {
    this.records.push(record);
    const waiters = [...this.waiters];
    this.waiters.clear();
    // Wake readers outside the publisher's call stack, as a network round trip would.
    if (waiters.length > 0) queueMicrotask(() => waiters.forEach((wake) => wake()));
    return this.end - 1;
  }

  waitBeyond(offset: number, signal: AbortSignal): Promise<void> {
    if (this.end > offset || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const wake = () => {
        this.waiters.delete(wake);
        signal.removeEventListener('abort', wake);
        resolve();
      };
      this.waiters.add(wake);
      signal.addEventListener('abort', wake, { once: true });
    });
  }

  release(before: number): void {
    const upTo = Math.min(before, this.end);
    if (upTo <= this.start) return;
    for (let o = this.start; o < upTo; o++) this.records[o - this.base] = undefined;
    this.start = upTo;
    // Compact in chunks so a long embedded run keeps neither the payloads nor a huge sparse array.
    const dead = this.start - this.base;
    if (dead >= 1024 && dead * 2 >= this.records.length) {
      this.records = this.records.slice(dead);
      this.base = this.start;
    }
  }
}

/** A topic of the embedded bus: N append-only partitions with Kafka-style offsets. */
export class PartitionedLog {
  private readonly partitions: Partition[];

  constructor(
    readonly topic: string,
    partitionCount: number,
  ) {
    if (!Number.isInteger(partitionCount) || partitionCount < 1)
      throw new Error(`topic ${topic}: invalid partition count ${partitionCount}`);
    this.partitions = Array.from({ length: partitionCount }, () => new Partition());
  }

  get partitionCount(): number {
    return this.partitions.length;
  }

  append(partition: number, record: StoredRecord): number {
    return this.at(partition).append(record);
  }

  /**
   * The record at `offset`, or — when `offset` was already released — the oldest retained one
   * (Kafka's auto.offset.reset=earliest). Undefined at the end of the log.
   */
  read(partition: number, offset: number): { offset: number; record: StoredRecord } | undefined {
    const p = this.at(partition);
    const o = Math.max(offset, p.start);
    const record = o < p.end ? p.records[o - p.base] : undefined;
    return record ? { offset: o, record } : undefined;
  }

  startOffset(partition: number): number {
    return this.at(partition).start;
  }

  endOffset(partition: number): number {
    return this.at(partition).end;
  }

  /** Resolves once a record exists at `offset` or beyond, or when `signal` aborts. */
  waitBeyond(partition: number, offset: number, signal: AbortSignal): Promise<void> {
    return this.at(partition).waitBeyond(offset, signal);
  }

  /** Drops payloads below `offset` (every consuming group has committed past them). */
  release(partition: number, offset: number): void {
    this.at(partition).release(offset);
  }

  private at(partition: number): Partition {
    const p = this.partitions[partition];
    if (!p) throw new Error(`topic ${this.topic} has no partition ${partition}`);
    return p;
  }
}
