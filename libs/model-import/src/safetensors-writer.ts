// A streaming safetensors writer (https://github.com/huggingface/safetensors: u64 little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}}, then the tensors' bytes):
// the header is known from the shapes alone, so each tensor is produced, written and dropped in
// turn and memory stays at one tensor however large the model.
import { promises as fsp } from 'node:fs';

export interface PlannedTensor {
  name: string;
  shape: readonly number[];
}

export class SafetensorsStream {
  private index = 0;

  private constructor(
    private readonly fh: fsp.FileHandle,
    private readonly tensors: readonly PlannedTensor[],
  ) {}

  /** Creates the file and writes the header for F32 tensors in the given order. */
  static async create(path: string, tensors: readonly PlannedTensor[], metadata: Record<string, string> = {}): Promise<SafetensorsStream> {
    const header: Record<string, unknown> = {};
    if (Object.keys(metadata).length) header.__metadata__ = metadata;
    let offset = 0;
    for (const t of tensors) {
      const bytes = 4 * t.shape.reduce((a, d) => a * d, 1);
      header[t.name] = { dtype: 'F32', shape: [...t.shape], data_offsets: [offset, offset + bytes] };
      offset += bytes;
    }
    let json = Buffer.from(JSON.stringify(header), 'utf8');
    // The data section starts 8-byte aligned (spaces are valid JSON padding).
    const pad = (8 - (json.length % 8)) % 8;
    if (pad) json = Buffer.concat([json, Buffer.alloc(pad, 0x20)]);
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(json.length));
    const fh = await fsp.open(path, 'wx');
    const stream = new SafetensorsStream(fh, tensors);
    try {
      await stream.writeAll(len);
      await stream.writeAll(json);
    } catch (e) {
      await fh.close();
      throw e;
    }
    return stream;
  }

  private async writeAll(u: Uint8Array): Promise<void> {
    for (let done = 0; done < u.length;) {
      const { bytesWritten } = await this.fh.write(u, done, Math.min(u.length - done, 1 << 30));
      done += bytesWritten;
    }
  }

  /** Writes the next tensor's values (they must come in the order given to create). */
  async write(name: string, data: Float32Array): Promise<void> {
    const t = this.tensors[this.index];
    if (!t || t.name !== name) throw new Error(`safetensors: wrote ${name}, expected ${t?.name ?? 'no more tensors'}`);
    const numel = t.shape.reduce((a, d) => a * d, 1);
    if (data.length !== numel) throw new Error(`safetensors: ${name} has ${data.length} values for shape [${t.shape.join(', ')}]`);
    await this.writeAll(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    this.index++;
  }

  /** Flushes to disk and closes; every planned tensor must have been written. */
  async close(): Promise<void> {
    try {
      if (this.index !== this.tensors.length)
        throw new Error(`safetensors: ${this.tensors.length - this.index} of ${this.tensors.length} tensors were not written`);
      await this.fh.sync();
    } finally {
      await this.fh.close();
    }
  }

  /** Closes without checking (on an error path; the caller removes the file). */
  async abandon(): Promise<void> {
    await this.fh.close().catch(() => undefined);
  }
}
