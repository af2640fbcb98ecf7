/**
 * OpenAI `stop` strings over decoded text. The engine only knows stop token ids, so the gateway
 * watches the text and ends the generation itself at the first stop string; the returned text
 * excludes it (OpenAI semantics).
 */
export class StopStringMatcher {
  private readonly longest: number;

  constructor(readonly stops: readonly string[]) {
    this.longest = stops.reduce((m, s) => Math.max(m, s.length), 0);
  }

  get active(): boolean {
    return this.stops.length > 0;
  }

  /** Index of the earliest stop string in `text` (searching from `from`), or -1. */
  find(text: string, from = 0): number {
    let best = -1;
    const start = Math.max(0, from - this.longest + 1);
    for (const s of this.stops) {
      const at = text.indexOf(s, start);
      if (at !== -1 && (best === -1 || at < best)) best = at;
    }
    return best;
  }

  /** How many trailing characters of `text` might begin a stop string (held back from a stream). */
  pendingSuffix(text: string): number {
    let hold = 0;
    for (const s of this.stops) {
      for (let k = Math.min(s.length - 1, text.length); k > hold; k--) {
        if (text.endsWith(s.slice(0, k))) {
          hold = k;
          break;
        }
      }
    }
    return hold;
  }
}
