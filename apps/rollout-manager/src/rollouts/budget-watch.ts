import type { Logger } from '@anvil/observability';

/** One watched session: `signal` aborts once its agent has been refused a call over its budget. */
export interface BudgetWatchHandle {
  signal: AbortSignal;
  /** Stops watching (the agent has ended). */
  done(): void;
}

/**
 * Tells the running black-box agents' steps which of their sessions have spent their call budget
 * (the gateway refused a call over it), so their rollouts end then rather than at their timeout:
 * an agent refused with 429 may retry, wait or loop. One admin request asks about every watched
 * session at once, every `intervalMs`, and only while something is watched.
 */
export class BudgetWatch {
  private readonly watched = new Map<string, AbortController>();
  private timer: NodeJS.Timeout | null = null;
  private failing = false;

  constructor(
    /** Of `sessionIds`, those whose budget is spent (the gateway's POST /admin/v1/sessions/batch/budget-spent). */
    private readonly spent: (sessionIds: string[]) => Promise<string[]>,
    private readonly intervalMs: number,
    private readonly logger: Logger,
  ) {}

  watch(sessionId: string): BudgetWatchHandle {
    const ctl = new AbortController();
    this.watched.set(sessionId, ctl);
    this.schedule();
    return {
      signal: ctl.signal,
      done: () => {
        if (this.watched.get(sessionId) === ctl) this.watched.delete(sessionId);
      },
    };
  }

  get size(): number {
    return this.watched.size;
  }

  private schedule(): void {
    if (this.timer || this.watched.size === 0) return;
    this.timer = setTimeout(() => void this.poll(), this.intervalMs);
    this.timer.unref();
  }

  private async poll(): Promise<void> {
    const ids = [...this.watched.keys()];
    try {
      for (let i = 0; i < ids.length; i += 1000) {
        for (const id of await this.spent(ids.slice(i, i + 1000))) {
          this.watched.get(id)?.abort('call budget spent');
          this.watched.delete(id);
        }
      }
      if (this.failing) this.logger.info('call budget checks answer again');
      this.failing = false;
    } catch (err) {
      // A rollout then runs to its agent's exit or its timeout, as without a budget watch; said once per outage.
      if (!this.failing) this.logger.warn('call budget check failed; retrying', { err });
      this.failing = true;
    } finally {
      this.timer = null;
      this.schedule();
    }
  }
}
