/**
 * Coalesces the requests of many concurrent callers into one call per tick (up to `maxBatch`),
 * each caller settling with its own answer: with hundreds of rollouts starting or ending
 * together, one round trip each would queue them behind one another. A failed batch rejects
 * every caller in it; `run` may also fail single items.
 */
export class Coalescer<In, Out> {
  private pending: { item: In; resolve: (out: Out) => void; reject: (err: unknown) => void }[] = [];
  private timer: NodeJS.Timeout | null = null;

  constructor(
    /** Answers `items` in order (one settled answer per item). */
    private readonly run: (items: In[]) => Promise<PromiseSettledResult<Out>[]>,
    private readonly opts: { lingerMs: number; maxBatch: number } = { lingerMs: 2, maxBatch: 256 },
  ) {}

  push(item: In): Promise<Out> {
    return new Promise((resolve, reject) => {
      this.pending.push({ item, resolve, reject });
      if (this.pending.length >= this.opts.maxBatch) this.flush();
      else this.timer ??= setTimeout(() => this.flush(), this.opts.lingerMs);
    });
  }

  private flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const batch = this.pending.splice(0, this.opts.maxBatch);
    if (batch.length === 0) return;
    this.run(batch.map((b) => b.item)).then(
      (outs) =>
        batch.forEach((b, i) => {
          const o = outs[i];
          if (o.status === 'fulfilled') b.resolve(o.value);
          else b.reject(o.reason);
        }),
      (err: unknown) => batch.forEach((b) => b.reject(err)),
    );
    if (this.pending.length) this.timer = setTimeout(() => this.flush(), this.opts.lingerMs);
  }
}

/** The answer of a batch whose items all succeeded with nothing to return. */
export function allDone(items: readonly unknown[]): PromiseSettledResult<void>[] {
  return items.map(() => ({ status: 'fulfilled', value: undefined }));
}
