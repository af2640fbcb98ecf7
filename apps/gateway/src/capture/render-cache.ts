/** A conversation rendered and encoded from scratch. */
export interface Rendered {
  text: string;
  promptIds: readonly number[];
}

/**
 * Renderings of whole conversations (a branch's prompt: chat template + encode), by the exact
 * JSON of what was rendered, least recently used out first, bounded by characters held. The
 * same opening prompt is rendered for every rollout of a group and every retried request; the
 * template and the encoder are the costliest part of a call that starts a branch. Keyed by the
 * exact serialisation rather than the fingerprint, which is deliberately blind to differences
 * (key order, spacing) that a template may still print.
 */
export class RenderCache {
  private readonly entries = new Map<string, Rendered>();
  private chars = 0;

  constructor(private readonly maxChars: number) {}

  static key(messages: unknown, tools: unknown, extra: unknown): string {
    return JSON.stringify([messages, tools, extra]);
  }

  get(key: string): Rendered | undefined {
    const hit = this.entries.get(key);
    if (hit) {
      this.entries.delete(key);
      this.entries.set(key, hit);
    }
    return hit;
  }

  put(key: string, value: Rendered): void {
    const cost = key.length + value.text.length + value.promptIds.length;
    if (cost > this.maxChars || this.entries.has(key)) return;
    this.entries.set(key, value);
    this.chars += cost;
    for (const [k, v] of this.entries) {
      if (this.chars <= this.maxChars) break;
      this.entries.delete(k);
      this.chars -= k.length + v.text.length + v.promptIds.length;
    }
  }
}
