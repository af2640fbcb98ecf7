import type { CreateSessionResponse } from '@anvil/contracts';

/** A gateway session opened for one rollout, its id already durable in rm_rollouts (so a restart closes it). */
export interface OpenedSession extends CreateSessionResponse {
  /** When the gateway closes it on its own (ms since epoch). */
  expiresAt: number;
  /** How long opening it took (the admin call and the state write). */
  openMs: number;
}

export interface LookaheadCandidate {
  rolloutId: string;
  open(): Promise<OpenedSession>;
}

/**
 * Opens the gateway sessions of the next rollouts to start while they still wait for a slot, so
 * a slot starts with the agent rather than with an admin round trip. Under load the gateway
 * answers every request after the calls queued before it, and a session opened inside the slot
 * cost a rollout as much as one of its agent's calls (measured: 3 s of a 21 s rollout at 1024
 * concurrent agents). At most `depth` rollouts, the first in start order, have a session opening
 * or open; admission is not touched (a session is no claim on staleness capacity: the gateway
 * stamps a session's start version at its first call).
 */
export class SessionLookahead {
  private readonly opening = new Map<string, Promise<OpenedSession | null>>();

  constructor(
    readonly depth: number,
    private readonly onError: (rolloutId: string, err: unknown) => void,
  ) {}

  get size(): number {
    return this.opening.size;
  }

  /** Opens sessions for the first `depth` candidates (in the order they will start) that have none yet. */
  fill(upcoming: Iterable<LookaheadCandidate>): void {
    if (this.depth <= 0) return;
    let seen = 0;
    for (const c of upcoming) {
      if (seen++ >= this.depth) break;
      if (this.opening.has(c.rolloutId)) continue;
      this.opening.set(
        c.rolloutId,
        c.open().catch((err: unknown) => {
          this.onError(c.rolloutId, err);
          return null;
        }),
      );
    }
  }

  /** The session opened for `rolloutId` (null: opening failed), or undefined when none was started. Hands it over: the caller closes it. */
  take(rolloutId: string): Promise<OpenedSession | null> | undefined {
    const p = this.opening.get(rolloutId);
    this.opening.delete(rolloutId);
    return p;
  }

  /** Every session nobody took (on stop), handed over to be closed. */
  drain(): Promise<OpenedSession | null>[] {
    const all = [...this.opening.values()];
    this.opening.clear();
    return all;
  }
}
