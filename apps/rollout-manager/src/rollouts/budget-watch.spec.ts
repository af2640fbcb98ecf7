import { describe, expect, it } from 'vitest';
import { createLogger } from '@anvil/observability';
import { BudgetWatch } from './budget-watch';

const quiet = () => createLogger({ service: 'rollout-manager', level: 'error', sink: () => undefined });
const tick = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Waits for `cond` (a loaded machine delays timers: no fixed sleeps for what must happen). */
async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++) await tick(10);
  if (!cond()) throw new Error(`not seen: ${what}`);
}

describe('BudgetWatch', () => {
  it('aborts the watched sessions whose budget is spent, asking about all of them in one request, only while some are watched', async () => {
    const asked: string[][] = [];
    const spent = new Set<string>();
    const watch = new BudgetWatch(
      async (ids) => {
        asked.push(ids);
        return ids.filter((id) => spent.has(id));
      },
      10,
      quiet(),
    );
    const a = watch.watch('a');
    const b = watch.watch('b');
    await until(() => asked.length >= 2, 'two checks');
    expect(asked[0]).toEqual(['a', 'b']);
    expect([a.signal.aborted, b.signal.aborted]).toEqual([false, false]);
    spent.add('b');
    await until(() => b.signal.aborted, 'b aborted');
    expect(a.signal.aborted).toBe(false);
    expect(b.signal.reason).toBe('call budget spent');
    // b is no longer asked about; a is until its agent ends.
    const n = asked.length;
    await until(() => asked.length > n, 'a later check');
    expect(asked.at(-1)).toEqual(['a']);
    a.done();
    b.done();
    expect(watch.size).toBe(0);
    const after = asked.length;
    await tick(60);
    // At most the check already under way; none scheduled after it.
    expect(asked.length).toBeLessThanOrEqual(after + 1);
  });

  it('keeps asking through failures, and says so once per outage', async () => {
    const lines: string[] = [];
    let fail = 3;
    const watch = new BudgetWatch(
      async (ids) => {
        if (fail-- > 0) throw new Error('gateway down (test)');
        return ids;
      },
      5,
      createLogger({ service: 'rollout-manager', level: 'info', sink: (l) => lines.push(l) }),
    );
    const h = watch.watch('s');
    await until(() => h.signal.aborted, 'aborted after the outage');
    expect(lines.filter((l) => l.includes('call budget check failed'))).toHaveLength(1);
    expect(lines.filter((l) => l.includes('answer again'))).toHaveLength(1);
    h.done();
  });
});
