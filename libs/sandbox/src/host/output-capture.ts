/** The last bytes kept apart from the head: an agent's answer is usually its last line. */
const TAIL_BYTES = 64 * 1024;

/** One output stream: the first `cap` bytes, the last few KiB, and the count of everything. */
export class OutputCapture {
  private readonly chunks: Buffer[] = [];
  private kept = 0;
  private tailBuf: Buffer = Buffer.alloc(0);
  total = 0;

  constructor(private readonly cap: number) {}

  push(d: Buffer): void {
    this.total += d.length;
    const tailCap = Math.min(this.cap, TAIL_BYTES);
    this.tailBuf = d.length >= tailCap ? d.subarray(d.length - tailCap) : Buffer.concat([this.tailBuf, d]).subarray(-tailCap);
    if (this.kept < this.cap) {
      // A copy: the stream may reuse the chunk's memory, and the slice would pin it anyway.
      const part = Buffer.from(d.subarray(0, this.cap - this.kept));
      this.chunks.push(part);
      this.kept += part.length;
    }
  }

  text(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }

  tail(): string {
    return Buffer.from(this.tailBuf).toString('utf8');
  }
}
