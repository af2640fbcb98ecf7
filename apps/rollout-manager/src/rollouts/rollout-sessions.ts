import type { Logger } from '@anvil/observability';
import type { ClosedSession, GatewayClient } from '../gateway-client';
import type { RolloutRow, RolloutStateStore } from '../state-store';
import type { GroupState } from './group-state';
import type { OpenedSession } from './session-lookahead';
import { sessionCallLimits } from './session-limits';

/** Past this much left of its life at the start, a session opened ahead is replaced by a fresh one. */
const SESSION_MARGIN_MS = 30_000;

/** A rollout attempt's session, and whether it was opened ahead (while the rollout waited for its slot). */
export type AttemptSession = OpenedSession & { ahead: boolean };

/** The gateway sessions of rollouts: opened with their ids durable before any agent gets a key, and always closed. */
export class RolloutSessions {
  constructor(
    private readonly d: {
      gateway: GatewayClient;
      state: RolloutStateStore;
      logger: Logger;
      model: string;
      /** The rollout's step limit (its call budget's default follows it; see session-limits.ts). */
      maxSteps(g: GroupState): Promise<number>;
    },
  ) {}

  /** Opens a session for `r`, with its call limits, and makes its id durable (rm_rollouts.session_id). */
  async open(g: GroupState, r: RolloutRow, lifeMs: number): Promise<OpenedSession> {
    const t0 = performance.now();
    const { spec, row } = g;
    const limits = sessionCallLimits(spec.limits, await this.d.maxSteps(g));
    const expiresAt = Date.now() + lifeMs;
    const session = await this.d.gateway.openSession({
      rolloutId: r.id,
      groupId: row.id,
      taskId: row.taskId,
      model: this.d.model,
      ...(spec.limits.maxContextTokens ? { maxContextTokens: spec.limits.maxContextTokens } : {}),
      ...(spec.weightSwap ? { weightSwap: spec.weightSwap } : {}),
      ...limits,
      expiresAt,
    });
    try {
      await this.d.state.sessionOpened(r.id, session.sessionId);
    } catch (err) {
      await this.close(session.sessionId);
      throw err;
    }
    return { ...session, expiresAt, openMs: performance.now() - t0 };
  }

  /** Closes a session (with the others closing in the same tick; idempotent at the gateway, retried); its final state (and calls, `withCalls`), or null when it is gone or the close failed. */
  async close(sessionId: string, withCalls = false): Promise<ClosedSession | null> {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        return await this.d.gateway.closeSessionBatched(sessionId, withCalls);
      } catch (err) {
        if (attempt === 2) this.d.logger.error('session close failed', { sessionId, err });
        else await new Promise((res) => setTimeout(res, 200 * 2 ** attempt));
      }
    }
    return null;
  }

  /** The session opened ahead when it is usable (opened, and long enough to live), else one opened now. */
  async forAttempt(
    g: GroupState,
    r: RolloutRow,
    ahead: Promise<OpenedSession | null> | undefined,
    timeoutMs: number,
  ): Promise<AttemptSession> {
    const opened = ahead ? await ahead : null;
    if (opened && opened.expiresAt - Date.now() >= timeoutMs + SESSION_MARGIN_MS) return { ...opened, ahead: true };
    if (opened) void this.close(opened.sessionId);
    return { ...(await this.open(g, r, timeoutMs + 60_000)), ahead: false };
  }
}
