import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';

/** Hex sha256 of a file, streamed. */
export async function sha256Of(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}
